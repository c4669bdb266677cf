#!/bin/bash
# GPU lease, session 23, second call: split the two rows of issue 26 that still miss on CUDA (after run23.sh):
# on-demand's run at 4,096 (the graph apart from attnviz's host work) and the corpus loop's ceiling (the GIL?).
export TAIL=${TAIL:-24}
source bench/gpu/device_env.sh
step od_split "${T_OD:-100}" python3 bench/gpu/ondemand_split.py --provider cuda --tokens 4096 --rounds 5 --runs 10
step gil "${T_GIL:-150}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 --rounds 3
