#!/bin/bash
# GPU lease: page-locked output slots on CUDA (runtime/pinning.py) against pageable ones and plain onnxruntime,
# then issue 26's on-demand table, in one device call (~2.5 min).  Payload: run12.sh's (onnxruntime-gpu 1.31.1,
# unpacked at /tmp/pay by earlier calls, or from /tmp/parts here); the MiniLM-shaped random-init stand-in at
# /tmp/gt is built here when missing, as run12.sh does.
#   bash bench/gpu/run_pin.sh      (logs under $OUT: pin_check.log, ondemand.log)
export TAIL=30
source bench/gpu/device_env.sh
step pin_check "${T_PIN:-120}" python3 bench/gpu/pin_check.py --rounds 5 --runs 2
step ondemand "${T_OND:-100}" python3 bench/ondemand_bench.py --provider cuda --rounds 2
