#!/bin/bash
# GPU lease: the generation loop's cache kept on the GPU (IO binding) checked against the numpy-fed loop, then
# issue 26's generation table, in one device call.  Payload: run12.sh's (onnxruntime-gpu 1.31.1 and the bench's
# GPT-2 export, parts copied to /tmp/parts by earlier calls: make_payload12.sh); a machine where run12.sh already
# unpacked it (/tmp/pay/.ok) reuses it.
#   bash bench/gpu/run26_iobind.sh      (logs under $OUT: iobind_check.log, generation.log)
source bench/gpu/device_env.sh
step iobind_check "${T_CHECK:-150}" python3 bench/gen_iobind_check.py --provider cuda --rounds 3 \
  --steps 64 128 256 1024 --folder /tmp/pay/genplain
step generation "${T_GEN:-200}" python3 bench/generation_plain_bench.py --provider cuda --rounds 3 \
  --steps 64 128 256 1024 --folder /tmp/pay/genplain
