"""The training loop: loss goes down, events, checkpoints, exact resume, clear errors."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnviz import AttnvizError  # noqa: E402
from attnviz.training import checkpoint as ckpt  # noqa: E402
from attnviz.training.loop import Progress, Trainer, lr_at  # noqa: E402
from attnviz.training.tasks import get_task  # noqa: E402


def _tiny(name, **train):
    task = get_task(name)
    mc, tc = task.configs("tiny")
    for k, v in train.items():
        setattr(tc, k, v)
    return task, mc, tc


@pytest.mark.parametrize(
    "name", ["sequence-classification", "forecasting", "vit-classification", "toy-reverse", "toy-caption"]
)
def test_tiny_training_decreases_loss(name):
    task, mc, tc = _tiny(name, steps=40)
    events = list(Trainer(task, mc, tc).events())
    assert all(isinstance(e, Progress) for e in events)
    assert events[-1].done and events[-1].step == 40 and events[-1].metrics
    losses = [e.loss for e in events if not e.done]
    assert np.mean(losses[-2:]) < losses[0]
    assert [e.step for e in events[:-1]] == sorted(e.step for e in events[:-1])


def test_lr_schedule():
    _, _, tc = _tiny("sequence-classification", steps=100, warmup=10, lr=1.0)
    assert lr_at(0, tc) == pytest.approx(0.1) and lr_at(9, tc) == pytest.approx(1.0)
    assert lr_at(99, tc) == pytest.approx(0.05, abs=0.01)


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_interrupted_run_resumes_exactly(tmp_path):
    task, mc, tc = _tiny("sequence-classification", steps=20, checkpoint_every=5, log_every=1)
    full = Trainer(task, mc, tc)
    list(full.events())

    out = tmp_path / "run"
    tr = Trainer(task, mc, tc, out=out)
    gen = tr.events()
    for ev in gen:
        if ev.step == 7:
            break
    gen.close()  # the GUI's stop button: checkpoint at step 7
    state = json.loads((out / ckpt.STATE).read_text())
    assert state["step"] == 7 and not state["finished"]

    again = Trainer(task, mc, tc, out=out)
    assert again.step == 7
    events = list(again.events())
    assert events[0].message.startswith("resumed from step 7")
    a, b = _weights(full.model), _weights(again.model)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert json.loads((out / ckpt.STATE).read_text())["finished"]
    with pytest.raises(AttnvizError, match="finished run"):
        Trainer(task, mc, tc, out=out)
    assert Trainer(task, mc, tc, out=out, restart=True).step == 0


def test_resume_refuses_other_config(tmp_path):
    task, mc, tc = _tiny("sequence-classification", steps=10, checkpoint_every=2)
    gen = Trainer(task, mc, tc, out=tmp_path).events()
    next(gen)
    gen.close()
    lr = tc.lr
    tc.lr = lr * 2
    with pytest.raises(AttnvizError, match="different task or configuration") as e:
        Trainer(task, mc, tc, out=tmp_path)
    # and says what differs, as checkpoint.json holds it against this run (audit25: "--steps 40" read as a riddle)
    assert f"({tmp_path / ckpt.STATE}: lr {lr!r}, now {lr * 2!r})" in str(e.value)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "json"])
def test_corrupt_checkpoint(tmp_path, damage):
    task, mc, tc = _tiny("sequence-classification", steps=10, log_every=1)
    gen = Trainer(task, mc, tc, out=tmp_path).events()
    for ev in gen:
        if ev.step == 3:
            break
    gen.close()
    t = tmp_path / ckpt.TENSORS
    if damage == "truncate":
        t.write_bytes(t.read_bytes()[:200])
    elif damage == "garbage":
        t.write_bytes(b"\x00" * 64)
    else:
        (tmp_path / ckpt.STATE).write_text("{not json")
    with pytest.raises(AttnvizError, match="corrupt"):
        Trainer(task, mc, tc, out=tmp_path)


def test_unwritable_output(tmp_path):
    task, mc, tc = _tiny("sequence-classification")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(AttnvizError, match="cannot write to output folder"):
        Trainer(task, mc, tc, out=blocker / "run")


# checkpoint.json fields a resumed run uses, edited by hand or damaged: each reached the loop as an internal error
# (the IndexError, TypeError or KeyError in the comment) where the run ended or restored its best step
HAND_EDITED_STATE = {
    "losses a string": ("losses", "x", "its losses are"),  # IndexError: self.losses[-1][1]
    "a loss a string": ("losses", [[1, "x"]], "its losses are"),  # written back into every later checkpoint
    "best a list": ("best", [1, 2], "its best is"),  # TypeError: self.best["step"]
    "best without its step": ("best", {"value": 1.0, "key": "loss", "metrics": {}}, "its best is"),  # KeyError
    "best step negative": ("best", {"step": -1, "value": 1.0, "key": "loss", "metrics": {}}, "its best is"),
    "metrics a number": ("metrics", 5, "its metrics are"),
    "finished a string": ("finished", "no", "its finished is"),  # "no" is truthy: read as finished
}


@pytest.mark.parametrize("case", list(HAND_EDITED_STATE))
def test_a_hand_edited_checkpoint_state_is_refused_before_resuming(tmp_path, case):
    key, value, words = HAND_EDITED_STATE[case]
    # (translation-synthetic: a task with a validation split; sequence-classification's was its test split)
    task, mc, tc = _tiny("translation-synthetic", steps=6, log_every=1, checkpoint_every=2, validation=8)
    gen = Trainer(task, mc, tc, out=tmp_path).events()
    for ev in gen:
        if ev.step == 3:
            break
    gen.close()
    state = json.loads((tmp_path / ckpt.STATE).read_text())
    state[key] = value
    (tmp_path / ckpt.STATE).write_text(json.dumps(state))
    with pytest.raises(AttnvizError, match=f"checkpoint .*{ckpt.STATE} is corrupt \\({words}") as e:
        list(Trainer(task, mc, tc, out=tmp_path).events())
    assert "delete it or pass --restart" in str(e.value)


def test_a_checkpoint_state_with_nan_losses_still_resumes(tmp_path):
    """A diverged run's losses (and best value) are NaN, as JSON writes them: the check passes them."""
    task, mc, tc = _tiny("sequence-classification", steps=6, log_every=1, checkpoint_every=2)
    gen = Trainer(task, mc, tc, out=tmp_path).events()
    for ev in gen:
        if ev.step == 3:
            break
    gen.close()
    state = json.loads((tmp_path / ckpt.STATE).read_text())
    state["losses"] = [[1, float("nan")], *state["losses"][1:]]
    (tmp_path / ckpt.STATE).write_text(json.dumps(state))
    events = list(Trainer(task, mc, tc, out=tmp_path).events())
    assert events[0].message.startswith("resumed from step 3") and events[-1].done
