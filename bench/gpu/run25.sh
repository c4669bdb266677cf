#!/bin/bash
# GPU lease after session 25 (issue 26's on-demand row at 4,096 tokens, isolated: 1.092x plain on an H200 in session
# 23, in-process 1.006x): odiso25 cut the isolated run's host round trip (a run unchanged from the last goes as the
# parent's "again", repeats in the child with its kept Q/Kᵀ written in place, and its outputs are made in the
# parent while the child runs).  The deciding row first, then the four trace phases, then the per-part split
# against the tree before odiso25 (A: that tree's attnviz unpacked under $A beforehand, e.g.
# `git archive c4899e6a attnviz | tar -x -C /tmp/odA` carried with the payload; skipped where $A/attnviz is absent).
# Each step's timeout keeps the whole under a call's budget; set T_NAME=0 to skip one.  Payload and calls:
# bench/RESULTS.md's "session 23, lead: GPU lease".
export TAIL=${TAIL:-12}
A=${A:-/tmp/odA}
source bench/gpu/device_env.sh
step ondemand "${T_OND:-120}" python3 bench/ondemand_bench.py --provider cuda --lengths 4096 --rounds 4 --runs 10
TAIL=14 step od_trace "${T_TR:-40}" python3 bench/gpu/ondemand_trace.py --provider cuda --tokens 4096 --runs 20
if [ -d "$A/attnviz" ]; then
  TAIL=24 step od_parts "${T_PARTS:-180}" env OMP_NUM_THREADS=1 python3 bench/ondemand_host_parts.py --provider cuda \
    --a "$A" --tokens 4096 --rounds 3 --runs 20
fi
