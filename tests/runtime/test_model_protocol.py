"""Issue 28: one typed model surface.  Every model kind the runtime opens satisfies the model Protocol
(attnviz.runtime.protocol.AttnModel) with real members of the right kind, and nothing in attnviz probes a model
with getattr / hasattr or patches one through ``__dict__`` (a grep that is shown to fail on a probe)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from onnx_builders import split_export, tiny_text_model

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, PatchGrid, SiteInfo
from attnviz.runtime import AttentionModel, ModelSet, open_model
from attnviz.runtime.inputs import IOInfo, TextEncoder
from attnviz.runtime.limits import PositionLimit
from attnviz.runtime.protocol import METHODS, PROPERTIES, AttnModel, EncoderPair

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
KINDS = {"encoder", "decoder", "encoder-decoder", "vision", "vision-decoder"}


def _str_dict(d) -> bool:
    return isinstance(d, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in d.items())


# what each value member must hold (the Protocol's annotations, checked on the live objects)
VALUE_CHECKS = {
    "path": lambda m, v: isinstance(v, Path) and v.exists(),
    "name": lambda m, v: isinstance(v, str) and v != "",
    "kind": lambda m, v: v in KINDS,
    "meta": lambda m, v: isinstance(v, dict),
    "metadata": lambda m, v: _str_dict(v),
    "inputs": lambda m, v: isinstance(v, list) and v and all(isinstance(i, IOInfo) for i in v),
    "outputs": lambda m, v: isinstance(v, list) and v and all(isinstance(i, IOInfo) for i in v),
    "roles": lambda m, v: _str_dict(v) and list(v) == [i.name for i in m.inputs],
    "sites": lambda m, v: isinstance(v, list) and v and all(isinstance(s, SiteInfo) for s in v),
    "no_attention_reason": lambda m, v: v is None or isinstance(v, str),
    "provider": lambda m, v: v == "CPUExecutionProvider",
    "provider_note": lambda m, v: isinstance(v, str),
    "timings": lambda m, v: isinstance(v, dict) and all(isinstance(t, float) for t in v.values()) and "load_s" in v,
    "needs_probe": lambda m, v: isinstance(v, bool),
    "tokenizers": lambda m, v: (
        isinstance(v, tuple) and len(v) == 2 and all(t is None or isinstance(t, TextEncoder) for t in v)
    ),
    "position_limit": lambda m, v: v is None or (isinstance(v, PositionLimit) and v.tokens > 0),
    "vision_tower": lambda m, v: isinstance(v, bool),
}


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """One model of every kind the suite builds without torch or optimum: name -> (model, its class, kind)."""
    tmp = tmp_path_factory.mktemp("kinds")
    folder = split_export(MODELS / "translation.onnx", tmp / "export")
    return {
        "encoder file": (
            open_model(MODELS / "sequence-classification.onnx", provider="cpu"),
            AttentionModel,
            "encoder",
        ),
        "decoder file": (
            open_model(tiny_text_model(tmp / "gpt.onnx", causal=True), provider="cpu"),
            AttentionModel,
            "decoder",
        ),
        "encoder-decoder file": (
            open_model(MODELS / "translation.onnx", provider="cpu"),
            AttentionModel,
            "encoder-decoder",
        ),
        "vision file": (open_model(MODELS / "vit-classification.onnx", provider="cpu"), AttentionModel, "vision"),
        "captioning file": (open_model(MODELS / "captioning.onnx", provider="cpu"), AttentionModel, "vision-decoder"),
        "export folder": (open_model(folder, provider="cpu"), ModelSet, "encoder-decoder"),
        "decoder file of an export": (
            open_model(folder / "decoder_model.onnx", provider="cpu"),
            AttentionModel,
            "encoder-decoder",  # it has self and cross attention
        ),
    }


def test_the_protocol_names_the_surface_callers_use():
    assert set(VALUE_CHECKS) == set(PROPERTIES)  # every value member is checked below, and nothing else
    assert {"run", "analyze", "cache_stepper", "pair_with_encoder", "probe", "grid"} <= set(METHODS)


@pytest.mark.parametrize(
    "name",
    [
        "encoder file",
        "decoder file",
        "encoder-decoder file",
        "vision file",
        "captioning file",
        "export folder",
        "decoder file of an export",
    ],
)
def test_every_model_kind_satisfies_the_protocol(kinds, name):
    m, cls, kind = kinds[name]
    assert type(m) is cls and isinstance(m, AttnModel)
    assert m.kind == kind
    for member, ok in VALUE_CHECKS.items():
        assert member in vars(type(m)) or member in vars(m), f"{name}: {member} is not a member of {cls.__name__}"
        value = getattr(m, member)
        assert ok(m, value), f"{name}: {member} = {value!r:.200}"
    for member in METHODS:
        assert callable(getattr(m, member)), f"{name}: {member} is not a method"
    assert m.vision_tower is False  # none of these is a VLM's tower (tests/runtime/test_vlm*.py: those are)
    # the defaults and real values of the behaviour members
    assert isinstance(m.probe(), bool)
    d = m.describe()
    assert d["kind"] == m.kind and len(d["sites"]) == len(m.sites)
    grid = m.grid(17, (32, 32) if m.kind.startswith("vision") else None)
    assert grid is None or isinstance(grid, PatchGrid)
    stepper = m.cache_stepper()
    assert stepper is None or (callable(stepper.start) and callable(stepper.step))


def test_the_defaults_where_a_kind_has_nothing(kinds):
    """A folder runs its own encoder (no pairing) and knows its roles (no probe); a file without past inputs has
    no cache stepper; a graph without metadata, position table or tokenizer_config has no position limit."""
    folder, _, _ = kinds["export folder"]
    assert folder.pair_with_encoder() is None and folder.needs_probe is False
    enc, _, _ = kinds["encoder file"]
    assert enc.pair_with_encoder() is None and enc.cache_stepper() is None
    gpt, _, _ = kinds["decoder file"]
    assert gpt.position_limit is None and gpt.cache_stepper() is None
    fresh = open_model(gpt.path, provider="cpu")
    assert fresh.needs_probe is True  # a single stack without metadata: its causality is a guess until a run
    assert fresh.probe() and fresh.needs_probe is False and fresh.kind == "decoder"


def test_a_decoder_file_pairs_with_the_encoder_beside_it_through_a_real_member(kinds):
    """The pairing is an attribute given at open (folder.open_model), not a patched instance dict; the set it
    opens is itself a model of the Protocol and runs as the whole folder does."""
    dec, _, _ = kinds["decoder file of an export"]
    folder, _, _ = kinds["export folder"]
    assert "pair_with_encoder" not in vars(dec) and dec.encoder_pairing is not None
    pair = dec.pair_with_encoder()
    assert isinstance(pair, EncoderPair) and isinstance(pair.model, ModelSet) and isinstance(pair.model, AttnModel)
    assert dec.pair_with_encoder() is pair  # opened once
    assert pair.model.path == dec.path and pair.note == (
        "decoder_model.onnx ran on the encoder_hidden_states of encoder_model.onnx beside it"
    )
    ids = np.array([[5, 7, 9, 11, 2]])
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "decoder_input_ids": np.array([[1, 4, 6]])}
    a, b = pair.model.run(feeds), folder.run(feeds)
    assert isinstance(a, AttentionResult) and [s.label for s in a.sites] == [s.label for s in b.sites]
    assert all(np.array_equal(x.array(), y.array()) for x, y in zip(a.maps, b.maps))


def test_a_split_export_runs_as_the_file_it_was_cut_from(kinds):
    """The folder fixture is a real encoder-decoder: its maps equal the single file's (independent reference)."""
    folder, _, _ = kinds["export folder"]
    whole, _, _ = kinds["encoder-decoder file"]
    ids = np.array([[5, 7, 9, 11, 2]])
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "decoder_input_ids": np.array([[1, 4, 6]])}
    a, b = folder.run(feeds), whole.run(feeds)
    assert [s.label for s in a.sites] == [s.label for s in b.sites]
    for x, y in zip(a.maps, b.maps):
        np.testing.assert_allclose(x.array(), y.array(), atol=1e-5)


def test_a_decoder_file_without_its_encoder_says_what_to_do(tmp_path, kinds):
    folder, _, _ = kinds["export folder"]
    alone = tmp_path / "decoder_model.onnx"
    alone.write_bytes((folder.path / "decoder_model.onnx").read_bytes())
    m = open_model(alone, provider="cpu")
    with pytest.raises(AttnvizError, match="there is no encoder_model.onnx beside it"):
        m.pair_with_encoder()


# -- the code-quality gate: no probes, no instance patching ---------------------------------------------------------
# a model-named receiver: model, m, ms, paired, or any dotted name ending in model (self.model, session.model)
PROBE = re.compile(r"\b(?:getattr|hasattr)\(\s*(?:[\w.]*\bmodel|m|ms|paired)\s*,")
PATCH = re.compile(r"__dict__\s*\[|\b(?:[\w.]*\bmodel|m|ms|paired)\.__dict__\b")
# training's `model` is a torch / transformers module, not the runtime's model surface
EXEMPT = ("attnviz/runtime/protocol.py", "attnviz/training/")


def probes(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if PROBE.search(line) or PATCH.search(line)]


def test_the_probe_check_can_fail():
    bad = (
        'stepper = model.cache_stepper() if hasattr(model, "cache_stepper") else None\n'
        'name = getattr(self.session.model, "name", "")\n'
        'model.__dict__["_paired"] = paired\n'
        'cache = m.__dict__.setdefault("_grids", {})\n'
    )
    assert len(probes(bad)) == 4
    fine = 'flag = getattr(args, "max_tokens", None)\nok = hasattr(os, "posix_fallocate")\nself.__dict__.update(a=1)\n'
    assert probes(fine) == []


def test_no_model_is_probed_or_patched_outside_the_protocol():
    found = []
    for path in sorted((ROOT / "attnviz").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(EXEMPT):
            continue
        found += [f"{rel}: {line}" for line in probes(path.read_text(encoding="utf-8"))]
    assert found == [], "use the model Protocol's members (attnviz/runtime/protocol.py):\n" + "\n".join(found)
