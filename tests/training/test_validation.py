"""Model selection on a validation split carved out of the training data; gloss pairs; --set overrides."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.training import checkpoint as ckpt
from attnviz.training import data_translation as dt
from attnviz.training.loop import Trainer
from attnviz.training.tasks import get_task


class CountingTask:
    """Wraps a task and records which splits its evaluations saw (instrumentation, the task itself runs)."""

    def __init__(self, task):
        self._task = task
        self.calls: list[str] = []

    def __getattr__(self, name):
        return getattr(self._task, name)

    def evaluate(self, runner, data, mcfg):
        self.calls.append("test")
        return self._task.evaluate(runner, data, mcfg)

    def validate(self, runner, data, mcfg):
        self.calls.append("validation")
        return self._task.validate(runner, data, mcfg)


def _tiny(validation=4, steps=40, eval_every=10):
    task = get_task("translation-synthetic")
    mcfg, tcfg = task.configs("tiny")
    tcfg.steps, tcfg.eval_every, tcfg.validation = steps, eval_every, validation
    tcfg.align_weight, tcfg.align_heads = 0.5, [[0, 0], [0, 1]]
    return task, mcfg, tcfg


def test_validation_is_carved_from_training_and_disjoint():
    pairs = dt.synthetic_pairs(40, seed=3)
    fit, val = dt.carve_validation(pairs, 4)
    assert len(val) == 10 and len(fit) == 30
    assert {id(p) for p in fit}.isdisjoint({id(p) for p in val})
    assert [p.id for p in val] == [pairs[i].id for i in range(3, 40, 4)]

    task, mcfg, tcfg = _tiny()
    tr = Trainer(task, mcfg, tcfg)
    train_ids = {p.id for p in task._pairs["train"]}
    val_ids = {p.id for p in task._pairs["validation"]}
    assert val_ids and train_ids.isdisjoint(val_ids)
    assert len(tr.val_data["input_ids"]) == len(task._pairs["validation"])


def test_selection_never_evaluates_the_test_split_and_restores_the_best_step(tmp_path):
    task, mcfg, tcfg = _tiny()
    counting = CountingTask(task)
    tr = Trainer(counting, mcfg, tcfg, out=tmp_path / "run")
    seen = []  # (step, selection value) of every validation
    for ev in tr.events():
        if "validation" in ev.metrics and not ev.done:
            seen.append((ev.step, ev.metrics["validation"]["aer_select"]))
    # four validations (steps 10..40) and exactly one test evaluation, the last call
    assert [s for s, _ in seen] == [10, 20, 30, 40]
    assert counting.calls == ["validation"] * 4 + ["test"]
    best_step, best_value = min(seen, key=lambda sv: (sv[1], sv[0]))
    assert tr.best["step"] == best_step and tr.best["value"] == best_value
    assert tr.metrics["validation"]["step"] == best_step
    # the weights the final evaluation used are the best step's, as saved then
    saved = ckpt.read_weights(tmp_path / "run" / ckpt.BEST)
    for k, v in tr.model.state_dict().items():
        assert torch.equal(v, saved[k]), k
    # and measuring the validation split again with them gives the recorded best value
    again = task.validate(tr_runner(tr), tr.val_data, mcfg)["aer_select"]
    assert again == pytest.approx(best_value, abs=1e-12)


def tr_runner(tr):
    from attnviz.training.runners import TorchRunner

    tr.model.eval()
    return TorchRunner(tr.model, tr.device)


def test_validation_needs_a_carve():
    task, mcfg, tcfg = _tiny(validation=0)
    with pytest.raises(AttnvizError, match="validation"):
        task.make_split("validation", mcfg, tcfg)


def test_gloss_pair_links_each_word_to_its_own_gloss():
    p = dt.AlignedPair(
        id="x",
        src=("Βίβλος", "τὸν", "αὐτοῦ"),
        tgt=("The", "book", "of", "him"),
        links=frozenset({(0, 1)}),
        src_gloss=("book", "", "of him"),
    )
    g = dt.gloss_pair(p)
    assert g.tgt == ("book", "of", "him") and g.src == p.src and g.tagged
    assert g.links == {(0, 0), (2, 1), (2, 2)}  # the article has no gloss and no link
    assert dt.gloss_pair(dt.AlignedPair(id="y", src=("τὸν",), tgt=("the",), links=frozenset(), src_gloss=("",))) is None
    # the marker: the source side's [BOS] before the words, belonging to no word
    tok = dt.train_tokenizers([p], 50, 50)
    plain, tagged = tok.encode_pair(p), tok.encode_pair(g)
    assert tagged["src_ids"] == [tok.source.token_to_id(dt.BOS)] + plain["src_ids"]
    assert tagged["src_words"] == [-1] + plain["src_words"]


def test_label_smoothing_matches_the_hand_formula():
    task = get_task("translation-synthetic")
    task.label_smoothing = 0.2
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]]])
    labels = torch.tensor([[0, -100]])
    logp = torch.log_softmax(logits[0, 0], -1).numpy()
    want = -(0.8 * logp[0] + 0.2 * logp.mean())  # (1 - eps) on the label, eps spread uniformly
    assert float(task.loss(logits, {"labels": labels})) == pytest.approx(float(want), rel=1e-6)


def test_set_overrides_reach_the_stored_config_and_bad_ones_are_one_line(tmp_path, capsys):
    out = tmp_path / "r"
    args = ["train", "translation-synthetic", "--preset", "tiny", "--steps", "2"]
    ok = subprocess.run(  # the console path, in a fresh interpreter, once
        [sys.executable, "-m", "attnviz", *args]
        + ["--out", str(out), "--set", "dropout=0.25", "--set", "align_heads=[[0,1]]", "--set", "align_weight=1"],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model"]["dropout"] == 0.25 and cfg["train"]["align_heads"] == [[0, 1]]
    # the refusals through the same main() in this process (each subprocess paid seconds of torch import)
    for bad, msg in (("nosuch=1", "no such"), ("dropout", "FIELD=VALUE"), ("align_convention=sideways", "one of")):
        assert main([*args, "--out", str(tmp_path / "b"), "--set", bad]) == 2, bad
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_init_from_starts_with_the_runs_weights_and_tokenizers(tmp_path):
    from attnviz.training.commands.train import run as train_run

    base = tmp_path / "base"
    args = SimpleNamespace(
        task="translation-synthetic",
        out=str(base),
        preset="tiny",
        epochs=None,
        steps=5,
        seed=None,
        device=None,
        restart=False,
        quiet=True,
        overrides=[],
    )
    assert train_run(args) == 0
    task = get_task("translation-synthetic")
    mcfg, tcfg = task.configs("tiny")
    tcfg.init_from, mcfg.dropout = str(base), 0.3  # dropout may differ; the architecture may not
    tr = Trainer(task, mcfg, tcfg)
    saved = ckpt.read_weights(base / ckpt.TENSORS)
    for k, v in tr.model.state_dict().items():
        assert torch.equal(v, saved[k]), k
    from attnviz.training.export import read_config

    meta = read_config(base / "model.onnx")[3]
    assert task.tokenizers.source.to_str() == meta["tokenizer"]
    mcfg.d_ff = 64
    with pytest.raises(AttnvizError, match="differs"):
        Trainer(get_task("translation-synthetic"), mcfg, tcfg)


class BleuScheduleTask(CountingTask):
    """The real validation (AER and greedy-decoding BLEU both measured), with BLEU then replaced by a fixed
    per-step schedule so the floor splits the steps in a known way (instrumentation of the selection rule)."""

    def __init__(self, task, schedule: dict[int, float]):
        super().__init__(task)
        self.schedule = schedule
        self.step = 0
        self.measured: list[dict] = []

    def __setattr__(self, name, value):  # the trainer's switches (val_bleu, label_smoothing) reach the task
        target = self._task if name in ("val_bleu", "label_smoothing") else self
        object.__setattr__(target, name, value)

    def validate(self, runner, data, mcfg):
        m = super().validate(runner, data, mcfg)
        self.measured.append(dict(m))
        self.step += 10
        return {**m, "bleu": self.schedule[self.step]}


def test_bleu_floor_selects_the_best_aer_among_steps_that_translate_well_enough(tmp_path):
    task, mcfg, tcfg = _tiny(validation=8)
    tcfg.val_min_bleu = 5.0
    schedule = {10: 9.0, 20: 1.0, 30: 6.0, 40: 2.0}
    wrapped = BleuScheduleTask(task, schedule)
    tr = Trainer(wrapped, mcfg, tcfg, out=tmp_path / "run")
    for _ in tr.events():
        pass
    # every validation decoded the validation split (the real BLEU of greedy translations, a percentage)
    assert all(0.0 <= m["bleu"] <= 100.0 for m in wrapped.measured) and len(wrapped.measured) == 4
    aer = {10 * (i + 1): m["aer_select"] for i, m in enumerate(wrapped.measured)}
    assert len(set(aer.values())) > 1  # the steps differ, so the choice below is a real one
    eligible = [s for s in aer if schedule[s] >= 5.0]
    want = min(eligible, key=lambda s: (aer[s], s))
    assert tr.best["step"] == want and tr.best["value"] == aer[want]
    # without the floor the lowest AER of all steps would win; here that step is below the floor
    assert min(aer, key=lambda s: (aer[s], s)) not in eligible
    saved = ckpt.read_weights(tmp_path / "run" / ckpt.BEST)
    for k, v in tr.model.state_dict().items():
        assert torch.equal(v, saved[k]), k


def test_bleu_floor_needs_validation_and_a_translating_task():
    task, mcfg, tcfg = _tiny(validation=0)
    tcfg.val_min_bleu = 5.0
    with pytest.raises(AttnvizError, match="val_min_bleu"):
        Trainer(task, mcfg, tcfg)
    seq = get_task("sequence-classification")
    mcfg, tcfg = seq.configs("tiny")
    tcfg.validation, tcfg.val_min_bleu = 4, 5.0
    with pytest.raises(AttnvizError, match="val_min_bleu"):
        Trainer(seq, mcfg, tcfg)


def test_set_values_of_the_wrong_kind_are_refused_in_one_line_before_training(tmp_path, capsys):
    from attnviz.training.commands.train import _apply_overrides

    mcfg, tcfg = get_task("translation-synthetic").configs("tiny")
    _apply_overrides(mcfg, tcfg, ["lr=1", "validation=20", "gloss_pairs=true", "init_from=2024", "steps=7"])
    # a float field takes a JSON integer as that float; a string field takes the text as typed
    assert (tcfg.lr, tcfg.validation, tcfg.gloss_pairs, tcfg.init_from, tcfg.steps) == (1.0, 20, True, "2024", 7)
    assert type(tcfg.lr) is float
    for bad, msg in (
        ("steps=abc", "--set steps=abc: steps takes a whole number"),
        ("steps=2.5", "--set steps=2.5: steps takes a whole number"),
        ("steps=true", "--set steps=true: steps takes a whole number"),
        ("dropout=high", "--set dropout=high: dropout takes a number"),
        ("gloss_pairs=1", "--set gloss_pairs=1: gloss_pairs takes true or false"),
        ("align_heads=2", "--set align_heads=2: align_heads takes a JSON list"),
    ):
        with pytest.raises(AttnvizError) as e:
            _apply_overrides(*get_task("translation-synthetic").configs("tiny"), [bad])
        assert str(e.value) == msg
    # on the command line: exit 2 and that one line (it was an internal error, exit 1, from steps // 10)
    # (main() in this process: the console path of `train` runs in a fresh interpreter in the test above)
    cmd = ["train", "translation-synthetic", "--preset", "tiny"]
    rc = main(cmd + ["--out", str(tmp_path / "r"), "--set", "steps=abc"])
    assert (rc, capsys.readouterr().err.strip()) == (2, "attnviz: error: --set steps=abc: steps takes a whole number")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("bad", "msg"),
    [
        ("lr=-1", "train config: lr=-1.0 is out of range; it takes more than 0"),
        ("n_heads=0", "model config: n_heads=0 is out of range; it takes at least 1"),
        ("d_model=0", "model config: d_model=0 is out of range; it takes at least 1"),
        ("n_layers=0", "model config: n_layers=0 leaves the encoder-decoder without layers"),
        ("batch_size=0", "train config: batch_size=0 is out of range; it takes at least 1"),
        ("n_train=0", "train config: n_train=0 is out of range; it takes at least 1"),
        ("n_test=0", "train config: n_test=0 is out of range; it takes at least 1"),
        ("log_every=0", "train config: log_every=0 is out of range; it takes at least 1"),
        ("max_len=0", "model config: max_len=0 is out of range; it takes at least 1"),
        ("vocab_size=0", "model config: vocab_size=0 is out of range; it takes at least 1"),
        ("dropout=2", "model config: dropout=2.0 is out of range; it takes at least 0 and below 1"),
        ("label_smoothing=1", "train config: label_smoothing=1.0 is out of range; it takes at least 0 and below 1"),
        ("patch_size=0", "model config: patch_size=0 is out of range; it takes at least 1"),
    ],
)
def test_set_values_out_of_range_are_one_line_naming_the_field(tmp_path, capsys, bad, msg):
    """Each of these was an internal error from deep inside torch or numpy ("ZeroDivisionError: integer modulo by
    zero" for n_heads=0, "Invalid learning rate: -1.0", "high <= 0" for n_train=0, ...), exit 1."""
    from attnviz.cli import main

    out = tmp_path / "r"
    assert main(["train", "translation-synthetic", "--preset", "tiny", "--out", str(out), "--set", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"attnviz: error: {msg}")
    assert not out.exists()  # refused before the run folder is made


def test_a_cnn_image_decoder_still_takes_no_encoder_layers():
    from attnviz.training.config import MODEL_RANGES, TRAIN_RANGES, ModelConfig, TrainConfig

    assert ModelConfig(arch="image-decoder", image_encoder="cnn", n_layers=0).n_layers == 0
    # every range names a real field (a misspelt name would check nothing)
    assert set(MODEL_RANGES) <= set(ModelConfig.__dataclass_fields__)
    assert set(TRAIN_RANGES) <= set(TrainConfig.__dataclass_fields__)


@pytest.mark.parametrize(
    "task, bad, field",
    [
        ("vit-classification", "n_classes=2", "n_classes"),
        ("sequence-classification", "vocab_size=3", "vocab_size"),
        ("translation-synthetic", "max_len=4", "max_len"),
        ("toy-reverse", "vocab_size=4", "vocab_size"),
    ],
)
def test_a_configuration_too_small_for_the_tasks_data_is_one_line(tmp_path, capsys, task, bad, field):
    """Valid on their own, too small for the task's data: these were IndexErrors from inside torch on the first
    batch ("Target 2 is out of bounds", "index out of range in self").  The line names the field and the value the
    data needs, computed here from the task's own splits."""
    from attnviz.cli import main
    from attnviz.training import data_check
    from attnviz.training.tasks import get_task

    t = get_task(task)
    mcfg, tcfg = t.configs("tiny")
    data = t.make_split("train", mcfg, tcfg)
    out = tmp_path / "r"
    assert main(["train", task, "--preset", "tiny", "--out", str(out), "--set", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"attnviz: error: model config: {field}") and "too small" in err[0]
    need = {
        "n_classes": lambda: int(data["labels"].max()) + 1,
        "vocab_size": lambda: int(data["input_ids"].max()) + 1,
        "max_len": lambda: max(data[k].shape[1] for k in ("input_ids", "decoder_input_ids") if k in data),
        "target vocabulary": lambda: (
            int(max(data["decoder_input_ids"].max(), data["labels"][data["labels"] >= 0].max())) + 1
        ),
    }[field]()
    assert f"need {need}; set it to {need} or more" in err[0]
    assert not out.exists()  # refused before the run folder is made
    assert data_check.check(task, mcfg, data) is None  # the preset itself fits
