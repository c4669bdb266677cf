"""Unbounded allocation (issue 24 item 5): a run's memory is estimated from shapes before anything is allocated
(runtime/memory.py, at every session's run) and refused over the cap (``--max-memory``, default half the RAM)
in one line; training counts parameters before torch allocates.  Each hostile run is itself capped (RLIMIT_AS),
so a regression fails with onnxruntime's own words instead of swapping the machine."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_run import Alone, bounded, run_cli_each, run_cli_forked
from onnx import helper, numpy_helper
from onnx_builders import tiny_text_model

from attnviz.core import limits
from attnviz.runtime import memory

AS_GB = 3.0  # address space of a hostile run: a normal tiny-model run needs well under it
TEXT = "the cat sat on the mat"


def one_line(err: str, *words):
    assert err.startswith("attnviz: error:"), err
    assert "\n" not in err.strip() and "Traceback" not in err, err
    for w in words:
        assert w.lower() in err.lower(), (w, err)


def swollen(dst: Path, dims, op: str = "Expand") -> Path:
    """tiny_text_model whose attention scale goes through a ``dims``-sized tensor first: ReduceMax(Expand(scale))
    (the same scale, so the maps are the plain model's) or scale + ReduceMax(ConstantOfShape(0))."""
    m = onnx.load(str(tiny_text_model(dst.with_name(dst.stem + "-plain.onnx"))))
    for n in m.graph.node:
        n.input[:] = ["scale_x" if i == "scale" else i for i in n.input]
    m.graph.initializer.append(numpy_helper.from_array(np.array(dims, np.int64), "big_shape"))
    if op == "Expand":
        new = [helper.make_node("Expand", ["scale", "big_shape"], ["big"])]
        new.append(helper.make_node("ReduceMax", ["big"], ["scale_x"], keepdims=0))
    else:
        zero = numpy_helper.from_array(np.zeros(1, np.float32))
        new = [helper.make_node("ConstantOfShape", ["big_shape"], ["big"], value=zero)]
        new += [helper.make_node("ReduceMax", ["big"], ["big_r"], keepdims=0)]
        new += [helper.make_node("Add", ["big_r", "scale"], ["scale_x"])]
    for k, n in enumerate(new):
        m.graph.node.insert(k, n)
    onnx.save(m, str(dst))
    return dst


def data_sized(dst: Path, side_per_id: int) -> Path:
    """The scale expanded to [s, s] where s = side_per_id × the largest token id fed: a size no shape inference
    can know before the run (only the arena's cap catches it)."""
    m = onnx.load(str(tiny_text_model(dst.with_name(dst.stem + "-plain.onnx"))))
    for n in m.graph.node:
        n.input[:] = ["scale_x" if i == "scale" else i for i in n.input]
    m.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([side_per_id], np.int64), "k"),
            numpy_helper.from_array(np.array([1], np.int64), "one1"),
        ]
    )
    new = [
        helper.make_node("ReduceMax", ["input_ids"], ["mx"], keepdims=1),
        helper.make_node("Reshape", ["mx", "one1"], ["mx1"]),
        helper.make_node("Mul", ["mx1", "k"], ["side"]),
        helper.make_node("Concat", ["side", "side"], ["shp"], axis=0),
        helper.make_node("Expand", ["scale", "shp"], ["big"]),
        helper.make_node("ReduceMax", ["big"], ["scale_x"], keepdims=0),
    ]
    for k, n in enumerate(new):
        m.graph.node.insert(k, n)
    onnx.save(m, str(dst))
    return dst


def _capped_cases(root: Path) -> dict[str, tuple[list, Alone]]:
    """The hostile runs of the tests below, each with its --out in a folder of its own under ``root``: case ->
    (argv, its memory cap and variables)."""
    swell = swollen(root / "swollen.onnx", [1, 1, 30000, 30000])  # 3.6 GB: read by three cases, written by none
    small = swollen(root / "small.onnx", [1, 1, 64, 64])
    texts = root / "t.txt"
    texts.write_text("the cat sat\nthe dog ran home\n")
    capped = Alone(memory_gb=AS_GB)

    def extract(model: Path, case: str, *more) -> list:
        (root / case).mkdir()
        return ["extract", model, "--text", TEXT, "--out", root / case / "m.npz", *more]

    (root / "corpus").mkdir()
    corpus = ["corpus", swell, "--texts", texts, "--out", root / "corpus" / "out", "--no-progress", "--workers", "1"]
    return {
        "3.6 GB": (extract(swell, "3.6 GB", "--max-memory", "2"), capped),
        "in-process": (
            extract(swell, "in-process", "--max-memory", "2"),
            Alone(memory_gb=AS_GB, env={"ATTNVIZ_INPROCESS": "1"}),
        ),
        "4 TB": (extract(swollen(root / "tb.onnx", [1_000_000, 1_000_000], op="ConstantOfShape"), "4 TB"), capped),
        "data-sized": (
            extract(data_sized(root / "data.onnx", 6000), "data-sized"),  # ids up to 8: 48,000² floats = 9.2 GB
            Alone(memory_gb=AS_GB, env={"ATTNVIZ_MAX_MEMORY": "2"}),
        ),
        "corpus": ([*corpus, "--max-memory", "2"], capped),
        "small swollen": (extract(small, "small swollen", "--max-memory", "1"), capped),
        "small plain": (extract(root / "small-plain.onnx", "small plain", "--max-memory", "1"), capped),
        "40 PB": (  # 4e16 bytes
            extract(swollen(root / "pb.onnx", [100_000_000, 100_000_000], op="ConstantOfShape"), "40 PB"),
            capped,
        ),
    }


@pytest.fixture(scope="module")
def capped(tmp_path_factory) -> dict[str, tuple[Path, int, str]]:
    """case -> (its folder, exit code, stderr) of the hostile runs of ``_capped_cases``, each a process of its own
    held to AS_GB of address space as run_cli's were, forked from one interpreter (cli_run.run_cli_forked): each
    paid a fresh interpreter's start and imports before.  Still a true test of the cap: RLIMIT_AS counts the
    address space the forked process maps (the pages it shares with its parent included), set before the command's
    first line; a refusal missed would allocate the 3.6 GB, 9.2 GB or more past it (the preloaded modules add
    ~0.2 GB of the 3 GB, which a fresh interpreter's run reaches too: it imports them by then)."""
    root = tmp_path_factory.mktemp("hostile-memory")
    cases = _capped_cases(root)
    ran = run_cli_forked(*((argv, root, alone) for argv, alone in cases.values()))
    return {name: (root / name, *bounded(result)) for name, result in zip(cases, ran)}


def test_an_8kb_model_expanding_to_3_6_gb_is_refused_before_it_runs(capped):
    folder, code, err = capped["3.6 GB"]
    assert (folder.parent / "swollen.onnx").stat().st_size < 8192
    assert code == 2
    one_line(err, "3.6 GB", "'big'", "[1, 1, 30000, 30000]", "cap of 2.0 GB", "--max-memory 4")
    assert not (folder / "m.npz").exists()


def test_the_same_model_in_process_is_refused_too(capped):
    """ATTNVIZ_INPROCESS (corpus workers, Ray actors): the in-process session runs the same check."""
    _, code, err = capped["in-process"]
    assert code == 2
    one_line(err, "3.6 GB", "--max-memory")


def test_a_4_tb_constant_of_shape_is_refused_under_the_default_cap(capped):
    _, code, err = capped["4 TB"]
    assert code == 2
    one_line(err, "4.0 TB", "half of this machine", "--max-memory")


def test_a_size_read_from_the_data_meets_the_capped_arena(capped):
    _, code, err = capped["data-sized"]
    assert code == 2
    one_line(err, "memory cap", "--max-memory")


def test_a_corpus_is_refused_in_one_line_with_nothing_written(capped):
    folder, code, err = capped["corpus"]
    assert code == 2
    one_line(err, "3.6 GB", "--max-memory")
    assert not (folder / "out" / "heads.parquet").exists()


def test_a_small_swell_runs_and_gives_the_plain_models_maps(capped):
    """A bounded correct success: the scale's detour changes nothing (the plain model is the reference)."""
    got = {}
    for name in ("small swollen", "small plain"):
        folder, code, err = capped[name]
        assert code == 0, err
        got[name] = dict(np.load(folder / "m.npz"))
    assert got["small swollen"].keys() == got["small plain"].keys()
    for k in [k for k, v in got["small plain"].items() if v.dtype.kind == "f"]:
        np.testing.assert_array_equal(got["small swollen"][k], got["small plain"][k])


def test_the_estimate_counts_the_tensors_by_hand(tmp_path):
    """The Expand's own tensor is N²·4 bytes exactly; a 4,096-token run of a 2-layer, 2-head model keeps its
    two dense maps (2·2·4096²·4 bytes) and is not refused under the default cap."""
    plan = memory.MemoryPlan(str(swollen(tmp_path / "s.onnx", [1, 1, 30000, 30000])))
    est = plan.estimate({"input_ids": ((1, 5), 7)}, ["logits"])
    assert est.largest[1] == (1, 1, 30000, 30000) and est.largest[3] == 30000 * 30000 * 4
    assert 30000 * 30000 * 4 <= est.bytes < 30000 * 30000 * 4 * 1.01

    m = onnx.load(str(tiny_text_model(tmp_path / "t.onnx")))
    softmax = [n.output[0] for n in m.graph.node if n.op_type == "Softmax"]
    t = 4096
    plan = memory.MemoryPlan(m.SerializeToString())
    est = plan.estimate({"input_ids": ((1, t), 7)}, ["logits", *softmax])
    maps = len(softmax) * 2 * t * t * 4
    assert maps <= est.bytes <= 3 * maps, (est, maps)
    memory.check_run(plan, {"input_ids": np.ones((1, t), np.int64)}, ["logits", *softmax], "t.onnx")


def test_the_cap_flag_and_variable_refuse_nonsense(monkeypatch):
    monkeypatch.setenv(limits.MEMORY_ENV, "lots")
    with pytest.raises(limits.AttnvizError, match="ATTNVIZ_MAX_MEMORY"):
        limits.memory_cap()
    with pytest.raises(limits.AttnvizError, match="--max-memory"):
        limits.set_memory_cap(-1)


TRAIN = ["train", "sequence-classification", "--preset", "tiny"]
# the hostile training sizes of the four train tests below: their --set (and --max-memory) arguments
TRAIN_SIZES = {
    "million-wide": ["--set", "d_model=1000000"],
    # a 100 GB cap: the activations (16 GB) pass it on any machine, the parameters (TB) do not
    "thin-layers": [
        *[x for s in ["n_layers=100000000", "batch_size=1", "max_len=2", "d_ff=1"] for x in ("--set", s)],
        *["--max-memory", "100"],
    ],
    "trillion-positions": ["--set", f"max_len={10**12}"],
    "1e30-layers": ["--set", f"n_layers={10**30}"],
}


@pytest.fixture(scope="module")
def hostile_trainings(tmp_path_factory) -> dict[str, tuple[Path, int, str]]:
    """case -> (--out, exit code, stderr) of ``attnviz train`` with that case's sizes: the four commands run in one
    interpreter (cli_run.run_cli_each; each of them paid the torch import before its refusal: a refusal from sizes
    alone is the same line whatever ran in the interpreter before), bounded all together by 120 s (three of them had 60 s
    each alone): most of it is the one torch import, which took ~60 s of wall on this 2-core machine at load 13, so
    60 s for all four would fail a loaded run, not a hang."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("hostile-trainings")
    outs = {name: root / name / "run" for name in TRAIN_SIZES}
    ran = run_cli_each(*([*TRAIN, "--out", outs[name], *sets] for name, sets in TRAIN_SIZES.items()), bound_s=120)
    return {name: (outs[name], code, err) for name, (code, err) in zip(TRAIN_SIZES, ran)}


def test_train_with_a_million_wide_model_is_refused_before_torch_allocates(hostile_trainings):
    out, code, err = hostile_trainings["million-wide"]
    assert code == 2
    one_line(err, "4,000,088,000,034 parameters", "TB", "--max-memory", "--set")
    assert not out.exists()


def test_train_with_10_to_the_8_thin_layers_is_refused_in_seconds(hostile_trainings):
    """The parameter count built the model on torch's meta device as asked: 10**8 layers of a model whose
    activations fit a 100 GB cap (batch 1, 2 positions, d_ff 1) looped for hours creating modules, a hang, not a refusal.
    Counted from two layers a stack, it is one line at once; each layer holds at least its four d_model² attention
    projections (d_model 16 in the tiny preset)."""
    out, code, err = hostile_trainings["thin-layers"]
    assert code == 2
    one_line(err, "n_layers=100000000", "choose smaller sizes with --set")
    params = int(re.search(r"training this model \(([\d,]+) parameters; d_model=16,", err).group(1).replace(",", ""))
    assert params >= 10**8 * 4 * 16 * 16
    assert not out.exists()


def test_train_with_a_trillion_positions_is_refused_before_any_module_is_built(hostile_trainings):
    """max_len=10**12 overflowed torch's storage size in the meta build's causal mask: an internal error."""
    out, code, err = hostile_trainings["trillion-positions"]
    assert code == 2
    one_line(err, f"max_len={10**12}, batch_size=32: its activations alone) needs about", "choose smaller sizes")
    assert not out.exists()


@pytest.mark.parametrize(
    "arch",
    [
        {"arch": "encoder"},
        {"arch": "encoder-decoder", "head": "lm"},
        {"arch": "decoder", "head": "lm"},
        {"arch": "image-decoder", "head": "lm", "image_encoder": "cnn", "n_layers": 0},
    ],
)
def test_the_extrapolated_parameter_count_is_the_built_models(arch, monkeypatch):
    """The count from two layers a stack equals torch's count of the model built with every layer (3 + 3)."""
    pytest.importorskip("torch")
    from attnviz.training import budget
    from attnviz.training.config import preset_configs
    from attnviz.training.model import AttnModel

    mcfg, tcfg = preset_configs("tiny", {"n_layers": 3, "n_dec_layers": 3, **arch})
    seen = []
    monkeypatch.setattr(limits, "check_memory", lambda need, what, **kw: seen.append(what))
    budget.check_training_memory(mcfg, tcfg)
    built = sum(p.numel() for p in AttnModel(mcfg).parameters())
    assert f"({built:,} parameters;" in seen[-1], (built, seen)  # (seen[0]: the activations alone)


def _suggestion(line: str) -> str:
    """What the refusal tells to do: the line after the estimate (the sizes the user typed stay as typed)."""
    return line.split("; ", 1)[1]


def test_a_need_past_any_machine_names_what_lowers_it_not_a_cap_of_many_digits(monkeypatch):
    monkeypatch.setenv(limits.MEMORY_ENV, "16")
    with pytest.raises(limits.MemoryRefused) as e:
        limits.check_memory(5.2e35, "this run", hint="use a smaller input", lower="cut the input with --max-tokens N")
    line = str(e.value)
    assert (
        line
        == "this run needs about 5.2e+35 bytes, more memory than any machine has; cut the input with --max-tokens N"
    )
    # under a petabyte the cap is still the fix a larger machine can take: its number is short
    with pytest.raises(limits.MemoryRefused) as e:
        limits.check_memory(64e12, "this run", lower="unused")
    assert "--max-memory 70400 " in str(e.value) and "64.0 TB" in str(e.value)
    assert limits.size_text(2.5e15) == "2.5 PB" and not limits.beyond_any_machine(0.9e15)


def test_a_map_of_40_petabytes_names_max_tokens_and_ondemand(capped):
    _, code, err = capped["40 PB"]
    assert code == 2
    one_line(err, "PB", "more memory than any machine has", "--max-tokens", "--memory ondemand")
    line = err.strip()
    assert "--max-memory" not in line and not re.search(r"\d{7}", _suggestion(line))


def test_train_with_10_to_the_30_layers_names_the_sizes_to_lower_not_a_27_digit_cap(hostile_trainings):
    out, code, err = hostile_trainings["1e30-layers"]
    assert code == 2
    one_line(err, "more memory than any machine has", "choose smaller sizes with --set", "n_layers")
    line = err.strip()
    assert "--max-memory" not in line and not re.search(r"\d{7}", _suggestion(line))
    assert not out.exists()
