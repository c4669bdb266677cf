#!/bin/bash
# GPU lease, session 23, last call (~230 s of device time left): issue 26's deciding rows after fold23 (the
# corpus worker's per-batch host work cut) and the on-demand mask kept on the device, then the isolated on-demand
# run's phases.  Each step's timeout keeps the whole under the budget.
export TAIL=${TAIL:-12}
source bench/gpu/device_env.sh
step ab10k "${T_AB:-55}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 10000 --rounds 5 main:4x4
step ab1k "${T_AB1:-40}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 1000 --rounds 5 main:4x4
step ondemand "${T_OND:-60}" python3 bench/ondemand_bench.py --provider cuda --lengths 4096 --rounds 3 --runs 10
TAIL=14 step od_trace "${T_TR:-20}" python3 bench/gpu/ondemand_trace.py --provider cuda --tokens 4096 --runs 20
