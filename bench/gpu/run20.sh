#!/bin/bash
# GPU lease (prepared in session 19 for the next): what is left of issue 26 on CUDA, in one call after the payload
# parts (make_payload12.sh: .g1, then .g2 + .g3 with this call).  The corpus's loop split batch for batch in one
# process (the graph, attnviz's session wrappers, N threads on the raw session, BatchReducer.many at each depth,
# two sessions of their own (a CUDA stream each) for plain and for the statistics:
# session 19's timeline put the whole gap inside the tasks, ~2.9 ms a batch against plain's 2.0), the corpus row
# with more rounds (on-demand: 4 rounds of 10 runs a process; plain's walls spread 1.9-2.9 s across 4 rounds in session 19), and on-demand at 4,096 tokens
# (6 rounds overran 90 s in session 19).  ab10k also tries the threads layout with statistics sessions of their own
# (ATTNVIZ_CORPUS_SESSIONS=2, 4: a CUDA stream each) and the process layout again (session 14: its loop beat
# plain's, 1.08x, but four start-ups lost the command; reduce.combine and the kept graphs cut start-up since).
#   bash bench/gpu/run20.sh   (T_* : each step's timeout, 0 skips it; ~7 min in all, ~9 with the payload calls and the start)
export TAIL=${TAIL:-24}
source bench/gpu/device_env.sh
python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers(), 'no CUDA provider'"
TAIL=14 step loop_split "${T_LS:-120}" env OMP_NUM_THREADS=1 python3 bench/corpus_loop_split.py --provider cuda \
  --items 10000 --rounds 3 --depths 1 2 4 8
TAIL=18 step ab10k "${T_AB:-170}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 10000 \
  --rounds 5 main:4x4 main:4x4:sessions=2 main:4x4:sessions=4 main:8x2 \
  main:4x4:layout=processes
step ondemand "${T_OND:-150}" python3 bench/ondemand_bench.py --provider cuda --lengths 4096 --rounds 4 --runs 10
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
