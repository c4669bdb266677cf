#!/bin/bash
# GPU lease (session 14, memkept14; unmeasured on a GPU when written): the GPU memory a kept on-demand result's
# overview leaves behind.  Before memkept14 each site's head-model session and pooling twin kept its CUDA arena's
# peak (12.5 GB of an H100 after MiniLM's overview at 2,048 tokens, bench/RESULTS.md); now they are helpers
# (runtime/session.py make_session(helper=True): arena_extend_strategy kSameAsRequested, every request run with
# memory.enable_memory_arena_shrinkage=gpu:N), so they hold GPU memory only while a request runs.  Same model and
# tokens as run_thumbs.sh, the overview's thumbnails alone (--now-only), isolated (the default) now and as before
# (ATTNVIZ_HELPER_ARENA=1: the helpers keep their arenas), in-process now.  One device call, ~2 min.
# Payload and MiniLM stand-in: as run_kept.sh (device_env.sh: onnxruntime-gpu unpacked at /tmp/pay by earlier
# calls, or from /tmp/parts carried in this call: make_payload12.sh).
#   bash bench/gpu/run_kept_mem.sh   (logs under $OUT: mem_iso.log, mem_iso_before.log, mem_inproc.log, mem_test.log)
# Read: each log's "GPU memory ..." lines (nvidia-smi per process; the owner's pid is named) before the thumbnails,
# after their first pass and after the rounds, expected far below the old run's ~12.5 GB (the on-demand
# session's own arena and each helper's CUDA context share stay); "N site sessions: ..." (what onnxruntime says
# of them there: cuda_extend='kSameAsRequested', release='gpu:0'; the old run's 'kNextPowerOfTwo', ''); the speed cost of giving
# back: "thumbnails, kept: pooled there (now)" and "a layer's heads" medians against mem_iso_before.log's (108.5
# and 77.2 ms isolated, 21.9 and 18.1 in-process in session 14).  T_NEW / T_OLD / T_INP / T_TEST: each step's timeout
# (0 skips it).
export TAIL=14
export ATTNVIZ_QK_DEVICE=on  # the bench opens its "host" model with =off itself; =on is what auto does on CUDA
source bench/gpu/device_env.sh
python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers(), 'no CUDA provider'"
A=(--provider cuda --tokens 2048 --rounds 2 --thumbs 4 --now-only)
step mem_iso "${T_NEW:-40}" python3 bench/ondemand_qk_ab.py "${A[@]}"
ATTNVIZ_HELPER_ARENA=1 step mem_iso_before "${T_OLD:-40}" python3 bench/ondemand_qk_ab.py "${A[@]}"
step mem_inproc "${T_INP:-30}" python3 bench/ondemand_qk_ab.py "${A[@]}" --inprocess
# the unit test's CUDA half (skipped without a GPU): the helpers' settings read back from onnxruntime, both
# placements (needs pytest and onnx on the device; a failure to import says so in mem_test.log)
ATTNVIZ_FORCE_CPU= step mem_test "${T_TEST:-30}" python3 -m pytest -q -p no:cacheprovider tests/runtime/test_ondemand_kept_memory.py
