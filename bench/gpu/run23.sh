#!/bin/bash
# GPU lease, session 23: run20.sh's issue-26 rows, reordered so the rows that decide the issue come first (a start
# that eats the budget then cuts only the diagnosis), after two one-line checks of the CLI on CUDA: the demo's
# beam search (CPU gives -0.5551 -0.5667 -0.6217 -0.6369 for this text) and extract's early exit on CUDA.
#   bash bench/gpu/run23.sh   (after make_payload12.sh's parts, as run20.sh)
export TAIL=${TAIL:-24}
source bench/gpu/device_env.sh
python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers(), 'no CUDA provider'"
step beams 40 python3 -m attnviz extract models/translation.onnx --provider cuda \
  --text "μακάριοι οἱ πτωχοὶ τῷ πνεύματι" --generate 20 --beams 4 --out "$OUT/t.npz"
step early_exit 30 python3 -m attnviz extract models/sequence-classification.onnx --text "1 2 3 4" --provider cuda \
  --out /tmp/x.npz
step ondemand "${T_OND:-150}" python3 bench/ondemand_bench.py --provider cuda --lengths 4096 --rounds 4 --runs 10
TAIL=18 step ab10k "${T_AB:-170}" env OMP_NUM_THREADS=1 python3 bench/corpus_ab.py --provider cuda --items 10000 \
  --rounds 5 main:4x4 main:4x4:sessions=2 main:4x4:sessions=4 main:8x2 main:4x4:layout=processes
TAIL=14 step loop_split "${T_LS:-90}" env OMP_NUM_THREADS=1 python3 bench/corpus_loop_split.py --provider cuda \
  --items 10000 --rounds 3 --depths 1 2 4 8
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
