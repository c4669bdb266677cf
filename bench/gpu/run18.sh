#!/bin/bash
# GPU lease (session 18): issue 26's tables with --provider cuda in one device call, the unmet row (corpus on CUDA)
# first, then generation, the first map, on-demand at 4,096 tokens, and run_kept_mem.sh's GPU-memory rows (never
# run before).  Payload: make_payload12.sh's parts (onnxruntime-gpu 1.31.1 cut to sm_90, the generation bench's
# GPT-2 export, MiniLM's config + tokenizer), copied to /tmp/parts by the call before; device_env.sh unpacks them
# and stands a seeded random-init BERT of MiniLM's shape in for the weights.  Each step's log under $OUT.
#   bash bench/gpu/run18.sh   (T_* : each step's timeout, 0 skips it)
export TAIL=${TAIL:-24}
source bench/gpu/device_env.sh
python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers(), 'no CUDA provider'"
step corpus10k "${T_C10:-80}" env OMP_NUM_THREADS=1 python3 bench/corpus_bench.py --provider cuda --items 10000 \
  --rounds 3 --memory --no-per-batch
step corpus1k "${T_C1:-45}" env OMP_NUM_THREADS=1 python3 bench/corpus_bench.py --provider cuda --items 1000 \
  --rounds 3 --no-per-batch
TAIL=12 step generation "${T_GEN:-140}" python3 bench/generation_plain_bench.py --provider cuda --rounds 3 \
  --steps 64 128 256 1024 --folder /tmp/pay/genplain
step startup "${T_START:-45}" python3 bench/startup_bench.py --provider cuda --rounds 3
step ondemand "${T_OND:-45}" python3 bench/ondemand_bench.py --provider cuda --lengths 4096 --rounds 3
export ATTNVIZ_QK_DEVICE=on
A=(--provider cuda --tokens 2048 --rounds 2 --thumbs 4 --now-only)
TAIL=10 step mem_iso "${T_MEM:-40}" python3 bench/ondemand_qk_ab.py "${A[@]}"
ATTNVIZ_FORCE_CPU= TAIL=6 step mem_test "${T_TEST:-30}" python3 -m pytest -q -p no:cacheprovider tests/runtime/test_ondemand_kept_memory.py
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
