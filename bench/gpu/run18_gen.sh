#!/bin/bash
# GPU lease (session 18, gencuda18): issue 26's generation rows after the loop's rows went straight into one array
# per map output (steps.Rows): the isolated path against the in-process loop and the plain IO-binding loop with the
# isolated wall split by the trace (gen_isolation_bench.py), then the table (generation_plain_bench.py).
# Payload as run18.sh's (device_env.sh unpacks it; the export at /tmp/pay/genplain).  Each step's log under $OUT.
#   bash bench/gpu/run18_gen.sh   (T_* : each step's timeout, 0 skips it)
source bench/gpu/device_env.sh
step geniso "${T_ISO:-85}" python3 bench/gen_isolation_bench.py --provider cuda --folder /tmp/pay/genplain \
  --steps 64 128 256 1024 --rounds 3
TAIL=12 step generation "${T_GEN:-85}" python3 bench/generation_plain_bench.py --provider cuda --rounds 3 \
  --steps 64 128 256 1024 --folder /tmp/pay/genplain
