#!/bin/bash
# GPU lease (session 19), first call: where the corpus's last ~0.3 s on CUDA goes, before changing code.
# The command's timeline by process and phase on CUDA and with `auto` (bench/corpus_timeline.py), what the
# statistics session costs to make by optimisation level and by how its graph could be kept
# (bench/gpu/cuda_session_cost.py), and generation's isolated / in-process / IO-binding split (gencuda18's bench).
# Payload: make_payload12.sh's parts copied to /tmp/parts by the call before (device_env.sh).
#   bash bench/gpu/run19_diag.sh   (T_* : each step's timeout, 0 skips it)
export TAIL=${TAIL:-40}
source bench/gpu/device_env.sh
python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers(), 'no CUDA provider'"
step timeline_cuda10k "${T_TL:-100}" env OMP_NUM_THREADS=1 python3 bench/corpus_timeline.py --provider cuda \
  --items 10000 --rounds 3 --show
TAIL=16 step session_cost "${T_SC:-110}" python3 bench/gpu/cuda_session_cost.py --provider cuda --rounds 2
TAIL=30 step geniso "${T_ISO:-75}" python3 bench/gen_isolation_bench.py --provider cuda --folder /tmp/pay/genplain \
  --steps 128 1024 --rounds 3
step timeline_auto10k "${T_TA:-50}" env OMP_NUM_THREADS=1 python3 bench/corpus_timeline.py --provider auto \
  --items 10000 --rounds 2
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
