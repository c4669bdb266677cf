#!/bin/bash
# GPU lease (session 14, kepthumbs14; unmeasured on a GPU when written): the overview of an on-demand result whose
# Q and Kᵀ stay on the GPU (CUDA's default, runtime/kept.py) -- every head of a site max-pooled there by the head
# model's pooling twin, one request a site, only [heads, 64, 64] back -- against the same thumbnails before (a
# request a head, each whole [2048, 2048] head brought back and pooled on the host) and against the host recompute
# (Q and Kᵀ brought to the host, ATTNVIZ_QK_DEVICE=off), at 2,048 tokens, MiniLM's shape (6 layers x 12 heads);
# also a layer's every head (Block.layer: one request now, 12 before).  One device call, ~1.5-2 min.
# Payload and MiniLM stand-in: as run_kept.sh (device_env.sh: onnxruntime-gpu unpacked at /tmp/pay by earlier
# calls, or from /tmp/parts carried in this call: make_payload12.sh).
#   bash bench/gpu/run_thumbs.sh      (logs under $OUT: thumbs_iso.log, thumbs_inproc.log)
# Read: each log's "overview pooling" rows (median ms; issue 26: overview redraw <= 150 ms at 2,048 tokens, the
# drawing itself ~20 ms more, bench/gui_bench.py) and the "max |difference| from the host's" lines (cuBLAS against
# numpy: the last float32 bits, expected <= 1e-6).  T_ISO / T_INP: each step's timeout (0 skips it).
export TAIL=16
export ATTNVIZ_QK_DEVICE=on  # the bench opens its "host" model with =off itself; =on is what auto does on CUDA
source bench/gpu/device_env.sh
python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers(), 'no CUDA provider'"
step thumbs_iso "${T_ISO:-75}" python3 bench/ondemand_qk_ab.py --provider cuda --tokens 2048 --rounds 2 --thumbs 4 --thumbs-host 2
step thumbs_inproc "${T_INP:-40}" python3 bench/ondemand_qk_ab.py --provider cuda --tokens 2048 --rounds 2 --thumbs 4 --thumbs-host 0 --inprocess
