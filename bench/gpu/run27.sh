#!/bin/bash
# GPU lease after session 27: issue 26's CUDA rows still open (corpus 10k was 0.936x, 9 rounds, H200) and the early CUDA
# context of the isolation child (unmeasured).  Payload and calls as run25.sh (make_payload12.sh -> .g1-.g3; three
# calls back to back; the third `bash bench/gpu/run27.sh`, timeout_s 400).  Deciding rows first; ~330 s in all.
export TAIL=${TAIL:-12}
source bench/gpu/device_env.sh
step ab10k "${T_AB:-90}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 10000 --rounds 9 main:4x4
step ab1k "${T_AB1:-60}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 1000 --rounds 9 main:4x4
step startup "${T_START:-60}" python3 bench/startup_bench.py --provider cuda --rounds 5
step ondemand "${T_OND:-70}" python3 bench/ondemand_bench.py --provider cuda --lengths 4096 --rounds 4 --runs 10
TAIL=45 step tl10k "${T_TL:-50}" env OMP_NUM_THREADS=1 python3 bench/corpus_timeline.py --provider cuda --items 10000 --rounds 3
