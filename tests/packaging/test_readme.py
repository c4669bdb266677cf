"""The README's Quick start has exactly two commands and CI runs the second one verbatim, in a fresh venv."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_two_commands_and_ci_runs_the_test_one():
    install_and_open, test = _quick_start()
    assert install_and_open.endswith("&& attnviz")
    ci = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd ", "ulimit ", "trap "))  # (core dumps: .ci/native-crash)
    ]
    # inside a venv it creates and activates first: the path the README's users take (issue 25: the helper venvs
    # of the tests saw only the base interpreter's packages there, and CI, in the system interpreter, never saw it)
    make_venv, run = ci
    assert " -m venv " in make_venv and "/bin/activate" in make_venv.split("-m venv", 1)[1]
    assert run == test
    # torch from the CPU index, before anything can pull the default (CUDA on Linux) build
    assert (
        test.startswith("pip install --retries 1 torch==")
        and "--index-url https://download.pytorch.org/whl/cpu" in test.split("&&")[0]
    )
    assert test.endswith("python -m pytest -q")


def test_every_command_and_extra_is_in_the_readme():
    """`attnviz average` was nowhere in the README, and the Install section listed the extras without `ray`."""
    import tomllib

    from attnviz.cli import COMMANDS

    text = (ROOT / "README.md").read_text()
    missing = [name for name in COMMANDS if f"attnviz {name} " not in text]
    assert not missing, f"commands the README never shows: {missing}"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    install = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(\w+)`", install.split("Extras:", 1)[1].split("\n\n", 1)[0]))
    assert set(extras) <= listed, f"extras the README's Install section does not name: {set(extras) - listed}"
