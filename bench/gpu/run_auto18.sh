#!/bin/bash
# GPU lease (session 18, autocuda18): issue 26's corpus row with --provider auto, attnviz's default, before and after
# autocuda18 (auto on a GPU machine took the CPU/cuda path's shortcuts only with --provider cuda before), then the
# fallback on real hardware: auto where a record says CUDA and CUDA is unusable (CUDA_VISIBLE_DEVICES= hides the
# device from the CUDA runtime, the device nodes stay) writes a `--provider cpu` command's bytes, exit 0.
# Needs run18's payload parts in /tmp/parts (device_env.sh) and, for "before", main's tree before the merge in .g9:
#   mkdir -p .g9 && git archive MAIN_BEFORE_MERGE attnviz | tar -x -C .g9      (then carry .g9)
#   bash bench/gpu/run_auto18.sh                 (the timeline: one call under 90 s)
#   T_TL=0 T_FB=60 bash bench/gpu/run_auto18.sh  (the fallback: a second call)   (T_*: a step's timeout, 0 skips it)
export TAIL=${TAIL:-40}
source bench/gpu/device_env.sh
python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers(), 'no CUDA provider'"
OTHER=(); [ -d .g9/attnviz ] && OTHER=(--other-root .g9)
step timeline_auto10k "${T_TL:-60}" env OMP_NUM_THREADS=1 python3 bench/corpus_timeline.py --provider auto \
  --items 10000 --rounds 3 "${OTHER[@]}"
TAIL=12 step auto_fallback "${T_FB:-0}" env OMP_NUM_THREADS=1 python3 bench/auto_fallback_check.py "${OTHER[@]}"
