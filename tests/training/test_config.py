import pytest

pytest.importorskip("torch")

from attnviz import AttnvizError
from attnviz.training.config import ModelConfig, TrainConfig, preset_configs
from attnviz.training.tasks import TASKS, get_task


def test_presets_and_round_trip():
    for preset in ("tiny", "demo"):
        mc, tc = preset_configs(preset)
        assert ModelConfig.from_dict(mc.to_dict()) == mc
        assert TrainConfig.from_dict(tc.to_dict()) == tc
        assert tc.preset == preset


def test_every_task_has_both_presets():
    for name, task in TASKS.items():
        if task.trains_itself:  # spoken-digits: its own Whisper settings (tests/training/test_spoken_digits_*)
            continue
        for preset in ("tiny", "demo"):
            mc, tc = task.configs(preset)
            assert tc.task == name
            mc.validate()


@pytest.mark.parametrize(
    "kw",
    [
        dict(arch="rnn"),
        dict(d_model=30, n_heads=4),
        dict(positions="rotary"),
        dict(arch="vit", image_size=30, patch_size=8),
    ],
)
def test_invalid_model_config(kw):
    with pytest.raises(AttnvizError):
        ModelConfig(**kw)


def test_unknown_preset_and_task():
    with pytest.raises(AttnvizError, match="tiny, demo"):
        preset_configs("huge")
    with pytest.raises(AttnvizError, match="sequence-classification"):
        get_task("nope")
