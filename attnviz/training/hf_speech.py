"""A speech encoder–decoder (Whisper) -> the folder optimum writes for it, without the cache files.

Why two files and not one ``model.onnx``: the runtime opens speech models as an encoder–decoder folder
(``encoder_model.onnx`` + ``decoder_model.onnx``, :class:`attnviz.runtime.folder.ModelSet`), which runs the encoder
once per clip and then only the decoder while generating, and computes the log-mel features from the folder's
``preprocessor_config.json``.  The decoder file takes ``input_ids`` and ``encoder_hidden_states`` (optimum's
names, so the folder is indistinguishable from an optimum export without past); generation re-runs the decoder on
the whole sequence each step (no ``decoder_with_past_model.onnx``).
"""

from __future__ import annotations

from pathlib import Path

from attnviz import AttnvizError
from attnviz.training.hf_onnx import _torch_nn_module, export_or_explain

ENCODER = "encoder_model.onnx"
DECODER = "decoder_model.onnx"
FEATURES = "preprocessor_config.json"


class _Encoder(_torch_nn_module()):  # type: ignore[misc]
    """``input_features`` -> ``last_hidden_state`` (the encoder alone, as optimum exports it)."""

    def __init__(self, model):
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, input_features):
        return self.encoder(input_features=input_features).last_hidden_state


class _Decoder(_torch_nn_module()):  # type: ignore[misc]
    """``input_ids``, ``encoder_hidden_states`` -> ``logits`` (the decoder and the output projection)."""

    def __init__(self, model):
        super().__init__()
        self.decoder = model.get_decoder()
        self.head = model.get_output_embeddings()

    def forward(self, input_ids, encoder_hidden_states):
        # an explicit all-ones mask: without one transformers looks for packed sequences in the positions
        # (aten::diff, which torch cannot export); the decoder's own causal mask is unchanged by it
        ones = input_ids.new_ones(input_ids.shape)
        h = self.decoder(
            input_ids=input_ids, attention_mask=ones, encoder_hidden_states=encoder_hidden_states
        ).last_hidden_state
        return self.head(h)


def check_source(model_dir: Path) -> None:
    """The folder must say how audio becomes features: without it the export could never be fed from a sound."""
    if not (model_dir / FEATURES).is_file():
        raise AttnvizError(
            f"{model_dir}: a speech model needs its feature extractor's {FEATURES} beside config.json "
            "(WhisperFeatureExtractor.save_pretrained writes it)"
        )


def export_speech(model, kw: dict, folder: Path, opset: int) -> None:
    """Write ``folder/encoder_model.onnx`` and ``folder/decoder_model.onnx`` traced on the example ``kw``."""
    import torch

    feats, ids = kw["input_features"], kw["decoder_input_ids"]
    # the frames are fixed (Whisper's encoder refuses any other length); batch and text length vary
    enc_axes = {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}}
    export_or_explain(
        _Encoder(model).eval(),
        {"input_features": feats},
        "last_hidden_state",
        folder / ENCODER,
        opset=opset,
        module=True,
        axes=enc_axes,
    )
    with torch.no_grad():
        states = model.get_encoder()(input_features=feats).last_hidden_state
    dec_axes = {
        "input_ids": {0: "batch", 1: "decoder_sequence"},
        "encoder_hidden_states": {0: "batch"},
        "logits": {0: "batch", 1: "decoder_sequence"},
    }
    export_or_explain(
        _Decoder(model).eval(),
        {"input_ids": ids, "encoder_hidden_states": states},
        "logits",
        folder / DECODER,
        opset=opset,
        module=True,
        axes=dec_axes,
    )
