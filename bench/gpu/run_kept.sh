#!/bin/bash
# GPU lease (session 13, ondemand13): on-demand's Q and Kᵀ kept on the GPU (runtime/kept.py: a drawn head computed
# there, only its rows brought back) against the same runs bringing Q and Kᵀ to the host (ATTNVIZ_QK_DEVICE=off,
# as before) and plain onnxruntime, in one device call (~3.5 min).  Payload and MiniLM stand-in: as run_pin.sh
# (device_env.sh: onnxruntime-gpu unpacked at /tmp/pay by earlier calls, or from /tmp/parts carried here).
#   T_PIN=150 T_OND=120 bash bench/gpu/run_kept.sh      (logs under $OUT: pin_check.log, ondemand.log)
# Read: the on-demand rows' "vs plain" (iso pinned / inproc pinned: kept; qk-host: before) against 1.05×; the
# "kept vs host Q/Kᵀ" max |diff| line (cuBLAS against numpy: last float32 bits, ≤ 1e-6); "a head drawn" (ms).
export TAIL=40
source bench/gpu/device_env.sh
python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers(), 'no CUDA provider'"
step pin_check "${T_PIN:-150}" python3 bench/gpu/pin_check.py --rounds 5 --runs 2
step ondemand "${T_OND:-120}" python3 bench/ondemand_bench.py --provider cuda --rounds 2 --qk both
