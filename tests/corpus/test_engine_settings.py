"""The engine settings (``EngineConfig``: --workers, --threads, --engine, --ray-address) are checked in one place
(``prestart.check_engine``) for the three corpus commands: each refuses a bad one in the same single line, exit 2,
before it writes anything."""

import pytest

from attnviz.cli import main


@pytest.mark.parametrize("command", ["corpus", "compare", "ablate"])
@pytest.mark.parametrize(
    "flags, line",
    [
        (["--workers", "0"], "--workers must be 1 or more"),
        (["--threads", "0"], "--threads must be 1 or more (leave it out for cores / workers)"),
        (["--ray-address", "auto"], "--ray-address needs --engine ray"),
    ],
)
def test_each_corpus_command_refuses_a_bad_engine_setting_in_the_same_line(
    planted, tmp_path, capsys, command, flags, line
):
    model, texts = planted
    before = {"corpus": [model], "compare": [model, model], "ablate": [model, "--all-heads"]}[command]
    out = tmp_path / "o"
    rc = main([command, *map(str, before), "--texts", str(texts), "--out", str(out), "--no-progress", *flags])
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"attnviz: error: {line}"]
    assert not out.exists()
