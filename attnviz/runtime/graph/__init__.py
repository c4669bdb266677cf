"""Find the attention in an ONNX graph, label it, order it, and expose it as graph outputs.

Three families of sites (see shared/reference/onnx-attention-findings.md):

* decomposed: a ``Softmax`` whose output (through NaN guards, casts, dropout) is input A of the
  P·V ``MatMul`` and whose input (through scale / mask / bias ops) comes from a Q·Kᵀ ``MatMul``;
* the standard ONNX ``Attention`` op (opset 23+): switched to ``qk_matmul_output_mode=3``;
* onnxruntime ``com.microsoft`` fused ops: ``MultiHeadAttention`` / ``GroupQueryAttention`` expose
  their optional QK output, packed ``Attention`` is recomputed from its input and weights.

The package is split along the seams onnxruntime's transformer tools use (``onnx_model.py`` apart from
``fusion_base.py`` and one file per pattern); each module depends only on those before it:

* :mod:`.index` — the graph index (producers, consumers, constants, dependency order) and model loading;
* :mod:`.base` — the :class:`Site` record and the scan state every pattern finder shares;
* :mod:`.softmax`, :mod:`.fused` — one finder per pattern family, registered by (domain, op);
* :mod:`.sites` — runs the registered finders over every node and body, pairs ``If`` branches;
* :mod:`.labels` — stack / kind / layer and canonical order;
* :mod:`.dtypes` — a tensor's element type without whole-model shape inference (fp16 graphs' bodies);
* :mod:`.instrument` — the extra outputs (dense maps, or Q/K for on-demand recompute);
* :mod:`.headmodel` — one head's rows from a site's kept Q/Kᵀ, on their device (on-demand maps kept there);
* :mod:`.ablate` — per-head gates (a ``[H]`` mask graph input per site) for head ablation (``attnviz ablate``);
* :mod:`.grids` — an image encoder's token grid.

This module re-exports the names the rest of attnviz uses (``from attnviz.runtime import graph as gr``).
Everything here works on an in-memory copy; the user's file is never written.
"""

from attnviz.runtime.graph.base import Finder, Scan, Site
from attnviz.runtime.graph.fused import MS_QK_METHODS, UNSUPPORTED_FUSED
from attnviz.runtime.graph.grids import SPATIAL_OPS, TokenGrid, token_grid
from attnviz.runtime.graph.headmodel import head_model
from attnviz.runtime.graph.index import MS, Graph, _opset, _reads, load_model
from attnviz.runtime.graph.instrument import (
    ELEMENTWISE,
    FUSED_OUTPUT,
    Exposed,
    can_recompute,
    epilogue_model,
    epilogue_side_inputs,
    instrument,
    instrumented_bytes,
)
from attnviz.runtime.graph.labels import DECODER_INPUT_RE, ENCODER_PAST_RE, PAST_RE, label_sites, node_scope
from attnviz.runtime.graph.sites import (
    ANALYSIS_SECONDS,
    FINDERS,
    METHOD_NOTES,
    REEXPORT_HINT,
    find_sites,
    local_depths,
    static_heads,
)
from attnviz.runtime.graph.softmax import DOWN_PASS, MATMULS, REDUCE_CONSUMERS, UP_PASS, softmax_axis
from attnviz.runtime.wire import weights_by_reference, weights_by_reference_in

__all__ = [
    "ANALYSIS_SECONDS",
    "DECODER_INPUT_RE",
    "DOWN_PASS",
    "ELEMENTWISE",
    "ENCODER_PAST_RE",
    "FINDERS",
    "FUSED_OUTPUT",
    "MATMULS",
    "METHOD_NOTES",
    "MS",
    "MS_QK_METHODS",
    "PAST_RE",
    "REDUCE_CONSUMERS",
    "REEXPORT_HINT",
    "SPATIAL_OPS",
    "UNSUPPORTED_FUSED",
    "UP_PASS",
    "Exposed",
    "Finder",
    "Graph",
    "Scan",
    "Site",
    "TokenGrid",
    "_opset",  # statgraph builds on the graph index's helpers
    "_reads",
    "can_recompute",
    "epilogue_model",
    "epilogue_side_inputs",
    "find_sites",
    "head_model",
    "instrument",
    "instrumented_bytes",
    "label_sites",
    "load_model",
    "local_depths",
    "node_scope",
    "softmax_axis",
    "static_heads",
    "token_grid",
    "weights_by_reference",
    "weights_by_reference_in",
]
