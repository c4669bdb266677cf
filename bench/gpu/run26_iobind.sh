#!/bin/bash
# GPU lease: the generation loop's cache kept on the GPU (IO binding) checked against the numpy-fed loop, then
# issue 26's generation table, in one device call.  Payload: run12.sh's (onnxruntime-gpu 1.31.1 and the bench's
# GPT-2 export, parts copied to /tmp/parts by earlier calls: make_payload12.sh); a machine where run12.sh already
# unpacked it (/tmp/pay/.ok) reuses it.
#   bash bench/gpu/run26_iobind.sh      (logs under $OUT: iobind_check.log, generation.log)
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pay
if [ ! -e /tmp/pay/.ok ]; then
  mkdir -p /tmp/pay/site && cat /tmp/parts/ort* | xz -d -T4 | tar -xf - -C /tmp/pay/site &&
    cat /tmp/parts/carry* | xz -d | tar -xf - -C /tmp/pay && touch /tmp/pay/.ok
fi
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib $SP/nvidia/*/*/lib 2>/dev/null | tr '\n' ':')${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PWD:/tmp/pay/site
nvidia-smi -L; nproc
python3 -c "import onnxruntime as o; print(o.__version__, o.get_available_providers())"
step() {  # step NAME SECONDS CMD...: its log kept under $OUT
  local name=$1 t=$2; shift 2
  echo "=== $name ($(date +%T))"
  timeout "$t" "$@" > "${OUT:-/tmp}/$name.log" 2>&1; echo "rc $?"; tail -n 14 "${OUT:-/tmp}/$name.log"
}
step iobind_check "${T_CHECK:-150}" python3 bench/gen_iobind_check.py --provider cuda --rounds 3 \
  --steps 64 128 256 1024 --folder /tmp/pay/genplain
step generation "${T_GEN:-200}" python3 bench/generation_plain_bench.py --provider cuda --rounds 3 \
  --steps 64 128 256 1024 --folder /tmp/pay/genplain
