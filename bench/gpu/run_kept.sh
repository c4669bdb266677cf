#!/bin/bash
# GPU lease (session 13, ondemand13; unmeasured on a GPU when written): on-demand's Q and Kᵀ kept on the GPU
# (runtime/kept.py: a drawn head computed there by the site's head model, only its rows brought back) against the
# same runs bringing Q and Kᵀ to the host (ATTNVIZ_QK_DEVICE=off: CUDA's behaviour before) and plain onnxruntime,
# in one device call (~6-7 min with the default per-step timeouts T_AB, T_PIN, T_OND; 0 skips a step).
# Payload and MiniLM stand-in: as run_pin.sh (device_env.sh: onnxruntime-gpu unpacked at /tmp/pay by earlier
# calls, or from /tmp/parts carried in this call).
#   bash bench/gpu/run_kept.sh      (logs under $OUT: ab_iso.log, ab_inproc.log, pin_check.log, ondemand.log)
# Read: ab_*'s "kept / host" (one process, alternating: the cleanest ratio) and "a head drawn"; pin_check's
# on-demand rows "vs plain" (iso/inproc pinned: kept; qk-host: before) against issue 26's 1.05x, and its
# "kept Q/Kᵀ vs host Q/Kᵀ: max |diff|" line (cuBLAS against numpy: the last float32 bits, expected <= 1e-6).
export TAIL=40
export ATTNVIZ_QK_DEVICE=on  # kept on the GPU (auto still brings them to the host until this run says it pays)
source bench/gpu/device_env.sh
python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers(), 'no CUDA provider'"
step ab_iso "${T_AB:-80}" python3 bench/ondemand_qk_ab.py --provider cuda --tokens 4096 --rounds 10
step ab_inproc "${T_AB:-80}" python3 bench/ondemand_qk_ab.py --provider cuda --tokens 4096 --rounds 10 --inprocess
step pin_check "${T_PIN:-150}" python3 bench/gpu/pin_check.py --rounds 5 --runs 2
step ondemand "${T_OND:-100}" python3 bench/ondemand_bench.py --provider cuda --rounds 2 --qk both
