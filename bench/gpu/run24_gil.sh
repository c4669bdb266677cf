#!/bin/bash
# GPU lease, session 24, gil24: the corpus loop's host work per batch after gil24 (REAL fed [B, 1, 1, T] and expanded
# in the graph, the last batches' statistics feeds kept, DIVISOR C-ordered, the memory cap kept) against gil23's host
# code in the same process, the statistics through onnxruntime's plain run against the page-locked binding (the CUDA
# path gil24 kept: GuardedSession.run_small), then the whole command against plain (issue 26's rows).
export TAIL=${TAIL:-14}
source bench/gpu/device_env.sh
step gil "${T_GIL:-150}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 --rounds 5 \
  --only gil23 "plain run" "bound run" "no finish"
step gilnull "${T_NULL:-60}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 \
  --rounds 9 --null --only gil23 "plain run" "bound run"
step ab10k "${T_AB:-55}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 10000 --rounds 5 main:4x4
step ab1k "${T_AB1:-40}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 1000 --rounds 5 main:4x4
