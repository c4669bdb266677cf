#!/bin/bash
# GPU lease after session 25: issue 26's CUDA rows after host25 and odiso25 (both unmeasured on a device).
# - host25: the statistics session ranks the fold's rows itself (runtime/statgraph.py _rank_nodes, RANKS; the host
#   ranks only rows TopK cannot settle).  ranknodes: where the ranking nodes run and whether CUDA's ranks are the
#   CPU's; ab10k/ab1k: the deciding ratio against plain; gil/gilnull: the loop with the host ranking as before
#   against this tree's, in one process (the real session, then the host work alone).
# - odiso25: the isolated on-demand run's host round trip cut (a run unchanged from the last goes as the parent's
#   "again", repeats in the child with its kept Q/Kᵀ written in place; outputs made in the parent while the child
#   runs).  ondemand: the deciding row; od_trace: the trace phases; od_parts: the per-part split against the tree
#   before (A: `git archive c4899e6a attnviz | tar -x -C /tmp/odA` carried with the payload; skipped without it).
# The deciding rows first.  Timeouts total ~550 s: call with timeout_s 580, or skip steps with T_NAME=0.
# Payload and calls: bench/RESULTS.md's "session 23, lead: GPU lease".
export TAIL=${TAIL:-14}
A=${A:-/tmp/odA}
source bench/gpu/device_env.sh
step ranknodes "${T_RANK:-30}" python3 bench/gpu/rank_nodes_check.py --provider cuda --runs 200
step ab10k "${T_AB:-60}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 10000 --rounds 5 main:4x4
step ondemand "${T_OND:-120}" python3 bench/ondemand_bench.py --provider cuda --lengths 4096 --rounds 4 --runs 10
step ab1k "${T_AB1:-40}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 1000 --rounds 5 main:4x4
step od_trace "${T_TR:-40}" python3 bench/gpu/ondemand_trace.py --provider cuda --tokens 4096 --runs 20
step gil "${T_GIL:-120}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 \
  --rounds 5 --only "host ranking" combine "no finish"
step gilnull "${T_NULL:-60}" env OMP_NUM_THREADS=1 python3 bench/gpu/corpus_gil.py --provider cuda --items 10000 \
  --rounds 9 --null --only "host ranking"
if [ -d "$A/attnviz" ]; then
  TAIL=24 step od_parts "${T_PARTS:-80}" env OMP_NUM_THREADS=1 python3 bench/ondemand_host_parts.py --provider cuda \
    --a "$A" --tokens 4096 --rounds 3 --runs 20
fi
