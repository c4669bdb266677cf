#!/bin/bash
# GPU lease, session 23, third call: on-demand at 4,096 after the mask stays on the device (issue 26's row),
# and the split again (the graph, attnviz's run in-process).
export TAIL=${TAIL:-24}
source bench/gpu/device_env.sh
step ondemand "${T_OND:-120}" python3 bench/ondemand_bench.py --provider cuda --lengths 4096 --rounds 4 --runs 10
step od_split "${T_OD:-80}" python3 bench/gpu/ondemand_split.py --provider cuda --tokens 4096 --rounds 5 --runs 10
