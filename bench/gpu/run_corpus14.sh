#!/bin/bash
# GPU lease (session 14, corpuscuda14): issue 26's corpus ratio on CUDA with the local engine's two worker layouts
# (attnviz/corpus/engines.py LAYOUTS) against plain onnxruntime, 10k items, in one device call of under 150 s:
#   - plain onnxruntime, 1 process × 16 threads (the baseline of session 14's 0.53×);
#   - attnviz corpus, processes layout, 4 workers × 4 threads (session 14's GPU default: four CUDA sessions);
#   - attnviz corpus, threads layout, 4 batches in flight on one process's one CUDA session (the new GPU default);
#   then (T_DEPTH) the threads layout with 2 and 8 batches in flight.  The bench also says whether each row wrote the
#   first row's bytes (same_outputs).  Payload as run12.sh (device_env.sh unpacks the parts already carried).
source bench/gpu/device_env.sh
step corpus14 "${T_C14:-95}" env OMP_NUM_THREADS=1 python3 bench/corpus_bench.py --provider cuda --items 10000 \
  --rounds "${ROUNDS:-3}" --memory --no-per-batch --no-single --layouts processes threads --gpu-workers 4
step corpus14_depth "${T_DEPTH:-40}" env OMP_NUM_THREADS=1 python3 bench/corpus_bench.py --provider cuda \
  --items 10000 --rounds 2 --memory --no-per-batch --no-single --layouts threads --gpu-workers 2 8
