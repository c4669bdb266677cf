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


# ---------------------------------------------------------------------------------------------- README vs the parser
# Every `attnviz SUBCOMMAND --flag ...` the README shows, in its code blocks and in its inline code, must parse as the
# current CLI reads it: a real subcommand, real flags (not a deprecated spelling), and a listed value where the flag
# takes one of a few (`--view image`, `--engine local|ray`).  Nothing runs: the parser alone, so the README cannot
# drift from the code unseen (session 20 ran its commands by hand).

_FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
_WORD_VALUE = re.compile(r"[a-z][a-z0-9_|-]*")  # a literal choice (or `a|b|c`), not a placeholder like N or MODEL


def _commands(text: str, commands) -> list[str]:
    """The command lines a reader would copy: fenced lines starting `attnviz ` (a trailing `\\` joins the next line;
    `# ...` comments dropped) and inline code starting `attnviz ` or a subcommand name then a flag (`figure --view
    image --picture N`)."""
    fence = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
    found = []
    for block in fence.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith("attnviz "):
                found.append(line.strip())
    for span in re.findall(r"`([^`\n]+(?:\n[^`\n]+)*)`", fence.sub("", text)):
        s = " ".join(span.split())
        if s.startswith("attnviz ") or (s.split(" ", 1)[0] in commands and " --" in s):
            found.append(s if s.startswith("attnviz ") else f"attnviz {s}")
    return found


def _problems(lines: list[str], parser) -> list[str]:
    from attnviz.runtime.commands.common import DeprecatedAlias

    subs = parser._subparsers._group_actions[0].choices
    out = []
    for line in lines:
        words = re.sub(r"\"[^\"]*\"|'[^']*'", "Q", line.split(" #", 1)[0]).split()  # quoted values are values
        if len(words) < 2 or not re.fullmatch(r"[a-z][\w-]*", words[1]):
            continue  # `attnviz`, `attnviz --help`, `attnviz MODEL.onnx ...`
        if words[1] not in subs:
            out.append(f"{line!r}: no subcommand {words[1]!r}")
            continue
        actions = subs[words[1]]._option_string_actions
        for i, word in enumerate(words):
            for flag in _FLAG.findall(word):
                action = actions.get(flag)
                if action is None:
                    out.append(f"{line!r}: `attnviz {words[1]}` has no flag {flag}")
                elif isinstance(action, DeprecatedAlias):
                    out.append(f"{line!r}: {flag} is a deprecated spelling of {action.new}")
                elif action.choices is not None and word == flag and i + 1 < len(words):
                    value = words[i + 1].rstrip("]")
                    if _WORD_VALUE.fullmatch(value):
                        out += [
                            f"{line!r}: {flag} takes {sorted(map(str, action.choices))}, not {v!r}"
                            for v in value.split("|")
                            if v not in action.choices
                        ]
    return out


def test_every_command_line_the_readme_shows_parses_with_the_current_cli():
    from attnviz.cli import COMMANDS, build_parser

    lines = _commands((ROOT / "README.md").read_text(), COMMANDS)
    # the README shows well over a hundred command lines; far fewer means the parsing above lost them
    assert len(lines) > 120, len(lines)
    assert {line.split()[1] for line in lines} >= set(COMMANDS)
    problems = _problems(lines, build_parser())
    assert not problems, "README commands the CLI would refuse:\n" + "\n".join(problems)


def test_the_readme_check_catches_a_stale_flag_subcommand_and_value():
    """The check above on a README with the mistakes it is there for (so an empty list above means something)."""
    from attnviz.cli import COMMANDS, build_parser

    text = (
        "Run `attnviz extract m.onnx --text hi --out o.npz` or `figure --view nosuchview --out f.pdf`.\n\n"
        "```bash\nattnviz corpus m.onnx --texts t.txt \\\n        --engine local|spark --out d   # --not-checked\n"
        "attnviz extract m.onnx --mode dense --no-such-flag 3 --out o.npz\nattnviz frobnicate m.onnx\n```\n"
    )
    lines = _commands(text, COMMANDS)
    assert len(lines) == 5
    problems = "\n".join(_problems(lines, build_parser()))
    assert "not 'spark'" in problems and "not 'nosuchview'" in problems and "not 'local'" not in problems
    assert "has no flag --no-such-flag" in problems and "--mode is a deprecated spelling of --memory" in problems
    assert "no subcommand 'frobnicate'" in problems and "no flag --not-checked" not in problems
    assert len(problems.splitlines()) == 5
