#!/bin/bash
# GPU lease after session 24 (issue 26's CUDA rows): the deciding rows first — the corpus against plain at 10k and
# 1k items (after gil24: REAL fed [B,1,1,T], feeds kept, the plain run in process; fold24: ranked as one integer
# sort, a task's combine at once), on-demand at 4,096 tokens (after odparent24: the parent's model layer cut ~0.08 ms a
# run; odiso23's child path never measured on a GPU) and the isolated run's phases — then, time left, where the
# corpus's host work stands against the older code in one process (fold24's and gil24's rows).  Each step's
# timeout keeps the whole under a call's budget; set T_NAME=0 to skip one.  Payload and calls: bench/RESULTS.md's
# "session 23, lead: GPU lease" (three calls: .g1, .g2, then .g3 with this script).
export TAIL=${TAIL:-12}
source bench/gpu/device_env.sh
step ab10k "${T_AB:-55}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 10000 --rounds 5 main:4x4
step ab1k "${T_AB1:-40}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 1000 --rounds 5 main:4x4
step ondemand "${T_OND:-60}" python3 bench/ondemand_bench.py --provider cuda --lengths 4096 --rounds 3 --runs 10
TAIL=14 step od_trace "${T_TR:-20}" python3 bench/gpu/ondemand_trace.py --provider cuda --tokens 4096 --runs 20
step fold "${T_FOLD:-100}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 \
  --rounds 3 --only combine
step gil "${T_GIL:-0}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 --rounds 5 \
  --only gil23 "plain run" "bound run" "no finish"
