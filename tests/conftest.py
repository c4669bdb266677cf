import os
import sys
from pathlib import Path

# helpers shared by test folders (hf_models, onnx_builders) live beside this file
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ATTNVIZ_FORCE_CPU", "1")  # CI has no GPU; keep onnxruntime's CUDA probing quiet
