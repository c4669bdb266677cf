#!/bin/bash
# GPU lease (session 19), second call: the corpus on CUDA after its worker sends one partial a task
# (reduce.combine), against main before it (a `git archive` of the commit before, unpacked in .g9) and across
# batches in flight (--workers) and task sizes (ATTNVIZ_CORPUS_CHUNK), whole second commands, interleaved
# (bench/corpus_ab.py); then issue 26's CUDA tables as run18.sh prints them.  Payload: make_payload12.sh's parts and
# the "before" tree's archive (before.tar.xz) in /tmp/parts.
#   bash bench/gpu/run19.sh   (T_* : each step's timeout, 0 skips it)
export TAIL=${TAIL:-24}
source bench/gpu/device_env.sh
python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers(), 'no CUDA provider'"
mkdir -p .g9 && tar -xJf /tmp/parts/before.tar.xz -C .g9
TAIL=22 step ab10k "${T_AB:-150}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 10000 \
  --rounds 4 --other-root .g9 main:4x4 other:4x4 main:4x4:chunk=64 main:4x4:chunk=128 main:2x8 main:8x2 main:1x16
step corpus10k "${T_C10:-80}" env OMP_NUM_THREADS=1 python3 bench/corpus_bench.py --provider cuda --items 10000 \
  --rounds 3 --memory --no-per-batch
step corpus1k "${T_C1:-45}" env OMP_NUM_THREADS=1 python3 bench/corpus_bench.py --provider cuda --items 1000 \
  --rounds 3 --no-per-batch
step ondemand "${T_OND:-90}" python3 bench/ondemand_bench.py --provider cuda --lengths 4096 --rounds 6
TAIL=12 step generation "${T_GEN:-120}" python3 bench/generation_plain_bench.py --provider cuda --rounds 3 \
  --steps 64 128 256 1024 --folder /tmp/pay/genplain
step startup "${T_START:-45}" python3 bench/startup_bench.py --provider cuda --rounds 3
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
