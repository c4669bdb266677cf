#!/bin/bash
# GPU lease, session 25, host25: the statistics session ranks the fold's rows itself (runtime/statgraph.py
# _rank_nodes, RANKS; the host ranks only rows TopK cannot settle).  First where the ranking nodes run and whether
# CUDA's ranks are the CPU's (a few seconds), then issue 26's deciding ratio against plain, then the loop with the
# host ranking as before against this tree's in one process (the real session, then the host work alone).  Payload
# and calls as for run24*.sh ("session 23, lead: GPU lease"); set T_NAME=0 to skip a step.
export TAIL=${TAIL:-16}
source bench/gpu/device_env.sh
step ranknodes "${T_RANK:-30}" python3 bench/gpu/rank_nodes_check.py --provider cuda --runs 200
step ab10k "${T_AB:-60}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 10000 --rounds 5 main:4x4
step gil "${T_GIL:-120}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 \
  --rounds 5 --only "host ranking" combine "no finish"
step gilnull "${T_NULL:-60}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 \
  --rounds 9 --null --only "host ranking"
step ab1k "${T_AB1:-40}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 1000 --rounds 5 main:4x4
