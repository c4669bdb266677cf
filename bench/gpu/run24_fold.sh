#!/bin/bash
# GPU lease, session 24, fold24: the corpus worker's fold after fold24 (ranked as one integer sort a row, a task's
# combine ranked at once) against gil24's fold (93201d0's ranked, one merge a batch) in the same process: the host
# work alone (--null: the statistics session a null graph) and with the real session, then issue 26's ratio.
export TAIL=${TAIL:-14}
source bench/gpu/device_env.sh
step foldnull "${T_NULL:-60}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 \
  --rounds 9 --null --only combine
step fold "${T_FOLD:-120}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 \
  --rounds 5 --only combine
step ab10k "${T_AB:-55}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 10000 --rounds 5 main:4x4
