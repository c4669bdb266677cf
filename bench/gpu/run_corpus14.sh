#!/bin/bash
# GPU lease (session 14, corpuscuda14): issue 26's corpus ratio on CUDA with the local engine's two worker layouts
# (attnviz/corpus/engines.py LAYOUTS) against plain onnxruntime, 10k items, in one device call of under 150 s:
#   corpus14: plain onnxruntime 1 process × 16 threads (the baseline of session 14's 0.53×); attnviz corpus in the
#     processes layout, 4 workers × 4 threads (session 14's GPU default: four CUDA sessions, the driver's probe in
#     its isolation child); in the threads layout, 4 batches in flight on one process's one CUDA session (the new
#     GPU default, its worker probing for the driver); 3 rounds.
#   corpus14_small: both layouts with 1 and 2 in flight (1 × 16: where the probe runs, the isolation child's
#     beside the worker or the one worker's before its statistics session; 2 × 8), 2 rounds.
# Each table ends with whether every row wrote the first row's bytes (corpus_bench.same_outputs).  Payload as
# run12.sh (device_env.sh unpacks the parts already carried; logs under $OUT).
source bench/gpu/device_env.sh
TAIL=${TAIL:-22}
step corpus14 "${T_C14:-95}" env OMP_NUM_THREADS=1 python3 bench/corpus_bench.py --provider cuda --items 10000 \
  --rounds "${ROUNDS:-3}" --memory --no-per-batch --no-single --layouts processes threads --gpu-workers 4
step corpus14_small "${T_SMALL:-50}" env OMP_NUM_THREADS=1 python3 bench/corpus_bench.py --provider cuda \
  --items 10000 --rounds 2 --memory --no-per-batch --layouts processes threads --gpu-workers 2
