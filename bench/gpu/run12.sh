#!/bin/bash
# GPU lease (session 12): issue 26's tables with --provider cuda, in one device call.
#   payload: onnxruntime-gpu 1.31.1 unpacked (no TensorRT provider), the bench's GPT-2 export (hf/ + onnx/) and
#   MiniLM's config + tokenizer, one tar.xz cut into parts that earlier calls copied to /tmp/parts (see
#   make_payload12.sh). The MiniLM weights do not travel: a seeded random-init BERT of MiniLM's shape stands in
#   (timings do not depend on the weights' values).
source bench/gpu/device_env.sh
step generation "${T_GEN:-200}" python3 bench/generation_plain_bench.py --provider cuda --rounds 3 \
  --steps ${GEN_STEPS:-64 128 256 1024} --folder /tmp/pay/genplain
step corpus "${T_CORPUS:-150}" env OMP_NUM_THREADS=1 python3 bench/corpus_bench.py --provider cuda --items 10000 \
  --rounds 2 --memory --no-per-batch
step startup "${T_START:-80}" python3 bench/startup_bench.py --provider cuda --rounds 2
step ondemand "${T_OND:-100}" python3 bench/ondemand_bench.py --provider cuda --rounds 2
