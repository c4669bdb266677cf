"""Command line: ``attnviz [open|inspect|extract|figure|train|eval|export-hf] ...``.

Each subcommand lives in its own module exposing ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; modules keep heavy imports (torch, Qt, onnxruntime) inside ``run`` so
``attnviz --help`` stays fast and headless commands never load Qt.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import re
import signal
import sys
import threading
import time
from typing import Any, NoReturn

from attnviz import AttnvizError, __version__
from attnviz.core.interrupts import TERMINATED_EXIT, Terminated, terminate_as_interrupt, terminated
from attnviz.core.leaving import holds_exit, set_leaves_at_once
from attnviz.core.limits import set_memory_cap
from attnviz.core.numbers import strict_numbers
from attnviz.core.text_file import text_from_file
from attnviz.core.writes import command_scope

# name -> module implementing it (registry, not if/elif)
COMMANDS = {
    "open": "attnviz.gui.command",
    "inspect": "attnviz.runtime.commands.inspect",
    "extract": "attnviz.runtime.commands.extract",
    "corpus": "attnviz.corpus.command",
    "compare": "attnviz.app.compare_command",
    "ablate": "attnviz.corpus.ablate",
    "figure": "attnviz.figures.command",
    "train": "attnviz.training.commands.train",
    "eval": "attnviz.training.commands.evaluate",
    "export-hf": "attnviz.training.commands.export_hf",
    "average": "attnviz.training.commands.average",
    "align": "attnviz.runtime.commands.align",
    "align-audio": "attnviz.corpus.align_audio",
    "testset": "attnviz.training.commands.testset",
}


# AttnvizError.param (the logical setting to fix) -> the flag that sets it; the GUI maps the same names
# to its widgets (MainWindow.PARAM_WIDGETS), so library messages never have to name a flag
PARAM_FLAGS = {
    "text": "--text",
    "text_pair": "--text-pair",
    "image": "--image",
    "audio": "--audio",
    "tokenizer": "--tokenizer",
    "variant": "--variant",
    "generate": "--generate",
    "max_tokens": "--max-tokens",
    "max_seconds": "--max-seconds",
    "inputs": "--inputs",
    "memory": "--memory",
    "block": "--block",
    "layer": "--layer",
    "layers": "--layers",
    "head": "--head",
    "aggregate": "--aggregate",
    "query": "--query",
    "step": "--step",
    "output": "--out",
    "view": "--view",
    "image_base": "--image-base",
    "scale": "--scale",
    "picture": "--picture",
    "image_from": "--image-from",
    "link_cut": "--link-cut",
    "width_in": "--width-in",
    "font_size": "--font-size",
    "dpi": "--dpi",
    "keep": "--keep",
    "batch": None,
}


def error_line(e: AttnvizError) -> str:
    """``attnviz: error: MESSAGE (FLAG)``: the message plus the flag that fixes it, unless it names it already."""
    flag = PARAM_FLAGS.get(getattr(e, "param", None) or "")
    msg = str(e)
    return f"attnviz: error: {msg}" + (f" (see {flag})" if flag and flag not in msg else "")


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors in one line, as every other refusal is: ``PROG: error: WHAT; see 'PROG --help'``.  argparse
    printed its whole usage block first (8–12 lines for extract or compare), with the problem on the last line."""

    def error(self, message: str) -> NoReturn:
        hint = _dash_hint(message, _PARSING, set(self._option_string_actions))
        self.exit(2, f"{self.prog}: error: {message}{hint}; see '{self.prog} --help'\n")


_PARSING: list[str] = []  # the command line main() is parsing, for the parsers' error lines (_dash_hint)


def _dash_hint(message: str, argv: list[str], options: set[str]) -> str:
    """argparse reads a value that starts with '-' (``--span -3-5``, ``--text -x``) as the next option and says
    only "expected one argument", which reads as if none had been typed: where one was, say how it is given."""
    m = re.fullmatch(r"argument ([\w/-]+): expected one argument", message)
    if m is None:
        return ""
    names = m.group(1).split("/")
    after = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in names]
    if not any(a.startswith("-") and a.split("=", 1)[0] not in options for a in after):
        return ""  # the flag ends the line, or stands before another flag of the command: its value is missing
    flag = max(names, key=len)  # "-o/--out": the long name
    return f" (a value that starts with '-' is read as an option: write {flag}=VALUE)"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, the other commands are listed but their modules are not imported: a command
    imports what it uses and nothing else (``attnviz inspect`` has no business loading Qt, torch, matplotlib
    or pyarrow: a quarter of a second to seconds before the first line)."""
    p = OneLineParser(prog="attnviz", description="Find, run and inspect attention in ONNX transformer models.")
    p.add_argument("--version", action="version", version=f"attnviz {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, modname in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        try:
            mod = importlib.import_module(modname)
        except ImportError as e:  # a part not installed (e.g. training extra): list it, explain on use
            sp = sub.add_parser(name, help=f"(unavailable: {e})")
            sp.set_defaults(_unavailable=f"'attnviz {name}' is unavailable: {e}")
            continue
        sp = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(sp)
        sp.add_argument(
            "--max-memory",
            type=float,
            metavar="GB",
            help="refuse a run whose memory, estimated from shapes before it starts, is over GB "
            "(default: half of this machine's RAM; also ATTNVIZ_MAX_MEMORY)",
        )
        strict_numbers(sp)  # every number flag in ASCII digits: int() took '1_0' as 10 and '٣' as 3 (core/numbers)
        sp.set_defaults(
            _run=mod.run,
            _parser=sp,
            _leaves_at_once=getattr(mod, "LEAVES_AT_ONCE", False),
            _own_signals=getattr(mod, "OWN_SIGNALS", False),
        )
    return p


def refuse_repeated(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A single-value flag given twice is refused in one line: argparse keeps the last and drops the first without
    a word (``--text A ... --text B`` would run on B alone: a lost input).  Flags that take several (``--image`` on
    the commands that read several images, appends, counts) are not single-value and pass."""
    seen: dict[str, str] = {}
    longs = [o for o in parser._option_string_actions if o.startswith("--")]
    for tok in argv:
        if tok == "--":
            break
        if not tok.startswith("-") or tok == "-" or tok.lstrip("-").replace(".", "", 1).isdigit():
            continue
        name = tok.split("=", 1)[0]
        action = parser._option_string_actions.get(name)
        if action is None and name.startswith("--") and parser.allow_abbrev:  # argparse's unique prefixes
            hits = {parser._option_string_actions[o] for o in longs if o.startswith(name)}
            action = hits.pop() if len(hits) == 1 else None
        if type(action) is not argparse._StoreAction:
            continue
        if action.dest in seen:
            flag = action.option_strings[-1]
            parser.error(f"{flag} given twice: give it once (the second would replace the first)")
        seen[action.dest] = name


def main(argv: list[str] | None = None, *, leave: bool = False) -> int:
    """Run the command ``argv`` (default: the process's arguments) and return its exit code.  ``leave``: this call
    is the process's last act (``python -m attnviz``), so after a command that allows it it ends the process
    itself (:func:`_leave_at_once`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    calm_blas()
    # plain `attnviz` (or `attnviz MODEL.onnx --text ...`, `attnviz --screenshot x.png`): the app
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        meant = _misspelt_command(argv[0]) if argv else None
        if meant is not None:
            print(f"attnviz: error: {meant}", file=sys.stderr)
            return 2
        argv = ["open", *argv]
    parser = build_parser(argv[0] if argv[0] in COMMANDS else None)
    # argparse reports a subcommand's unknown flags with the top-level usage ("COMMAND ..."), which does not say
    # what the command takes: the subcommand's own parser reports them, with its usage
    _PARSING[:] = argv
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if hasattr(args, "_parser"):
        refuse_repeated(args._parser, argv[1:])
    if getattr(args, "_unavailable", None):
        print(f"attnviz: error: {args._unavailable}", file=sys.stderr)  # exit 2: an error, spelled as every one
        return 2
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    at_once = bool(leave and args._leaves_at_once)
    set_leaves_at_once(at_once)  # (core/leaving.py: a Ctrl-C need not wait for a daemon thread then)
    try:
        code = _run_command(args)
    finally:
        set_leaves_at_once(False)
    if at_once:
        _leave_at_once(code)
    return code


# OpenBLAS's worker threads spin for 2**28 cycles (~0.1 s) after each call before they sleep: attnviz's numpy
# products are one-offs between waits (an on-demand head's Q·Kᵀ, in four chunks, each followed by the isolation child's
# epilogue), so at 4,096 tokens a head cost the window 155 ms of CPU where the product took 45, and on two cores the
# spinning thread held the core the child needed.  2**16 cycles (~20 us) still covers back-to-back calls.
BLAS_SPIN_ENV, BLAS_SPIN = "OPENBLAS_THREAD_TIMEOUT", "16"


def calm_blas() -> None:
    """Shorten OpenBLAS's spin (:data:`BLAS_SPIN_ENV`) for this process and its children, unless the user set it.
    Read once, where numpy loads OpenBLAS: so before numpy's import (no command imports it before this)."""
    os.environ.setdefault(BLAS_SPIN_ENV, BLAS_SPIN)


def _misspelt_command(word: str) -> str | None:
    """The line for a first word that is no file and nearly a command's name (`attnviz inspct MODEL`), else None.
    It was taken as a model for `open`, whose argparse then said "attnviz open: error: unrecognized arguments: MODEL",
    naming neither the typo nor the command meant (audit25)."""
    import difflib

    if word.startswith("-") or "/" in word or "." in word or os.path.exists(word):
        return None
    close = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.75)
    if not close:
        return None
    return f"no command '{word}'; did you mean 'attnviz {close[0]}'? (commands: {', '.join(COMMANDS)})"


def script() -> int:
    """The ``attnviz`` console script: ``main`` as the process's last act, as ``python -m attnviz`` runs it (the
    generated script only does ``sys.exit(script())``)."""
    return main(leave=True)


def _leave_at_once(code: int) -> None:
    """End the process with ``code`` as the interpreter's own exit would, without its teardown: the exit handlers
    run (multiprocessing's among them) and the streams are flushed, but the modules are not freed one by one
    (after ``attnviz corpus``: pyarrow's, numpy's and tokenizers', ~0.03-0.07 s CPU on the command's tail, when
    every result is written and closed and every worker stopped and joined).  Where a thread that the exit would
    wait for still runs, the exit is left to the interpreter (which returns here)."""
    me = threading.current_thread()
    if me is not threading.main_thread() or any(t is not me and holds_exit(t) for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that left, or a closed stream: as the interpreter would
            pass
    os._exit(code)


def _run_command(args: argparse.Namespace) -> int:
    out, err = sys.stdout, sys.stderr
    # names, metadata and messages come from files written by strangers: no terminal escape codes get through
    sys.stdout, sys.stderr = TerminalSafe(out), TerminalSafe(err)
    interrupts, previous = _count_interrupts()
    # `kill PID` stops a command as Ctrl-C does, its workers with it (a window handles its signals in its own loop)
    previous_term = None if getattr(args, "_own_signals", False) else terminate_as_interrupt()
    try:
        set_memory_cap(args.max_memory)  # before any model opens: child processes inherit it
        text_from_file(args)  # --text-file: its text is the command's --text from here on
        with command_scope():  # the inputs a command declares (core.writes.guard) are its own
            return int(args._run(args) or 0)
    except AttnvizError as e:
        print(one_line(error_line(e)), file=sys.stderr)
        return 2
    except Terminated as e:  # a message: what the command kept and how to go on (train's checkpoint)
        print("attnviz: terminated (SIGTERM)" + (f"; {e}" if str(e) else ""), file=sys.stderr)
        return TERMINATED_EXIT
    except KeyboardInterrupt as e:
        print("attnviz: interrupted" + (f"; {e}" if str(e) else ""), file=sys.stderr)
        return 130
    except MemoryError:
        print(
            "attnviz: error: out of memory; use a smaller input (or --memory ondemand for long inputs)", file=sys.stderr
        )
        return 2
    except BrokenPipeError:  # `attnviz inspect --json | head`: the reader left; not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not raise again
        return 0
    except Exception as e:  # never a traceback to the user; ATTNVIZ_DEBUG=1 shows it
        if previous_term is not None and terminated():  # a SIGTERM inside an extension's import, as a Ctrl-C's below
            print("attnviz: terminated (SIGTERM)", file=sys.stderr)
            return TERMINATED_EXIT
        if interrupts:  # Ctrl-C inside an extension's import surfaces as its ImportError("initialization failed")
            print("attnviz: interrupted", file=sys.stderr)
            return 130
        if os.environ.get("ATTNVIZ_DEBUG"):
            raise
        if isinstance(e, ModuleNotFoundError):  # an extra not installed (torch for train): the install step, not a bug
            from attnviz.core.extras import missing_line

            missing = missing_line(args.command, e)
            if missing is not None:
                print(f"attnviz: error: {missing}", file=sys.stderr)
                return 2
        print(
            f"attnviz: error: internal error ({type(e).__name__}: {one_line(str(e))[:200]}); this is a bug in attnviz, "
            "please report it — set ATTNVIZ_DEBUG=1 for the traceback",
            file=sys.stderr,
        )
        return 1
    finally:
        sys.stdout, sys.stderr = out, err
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)


def _count_interrupts() -> tuple[list[int], Any]:
    """Ctrl-C still raises KeyboardInterrupt as Python's own handler does, and is also counted: one that arrives
    while a C extension initialises (torch, transformers) comes out as that import's error, which is then told as
    the interrupt it was, not as an internal error.  Nothing changes where SIGINT is ignored or handled otherwise
    (a background job, a caller's handler) or off the main thread.  Returns the count and the handler to restore."""
    count: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        return count, None
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return count, None

    def counted(signum, frame):
        count.append(signum)
        signal.default_int_handler(signum, frame)

    _redeliver_swallowed_interrupts()
    return count, signal.signal(signal.SIGINT, counted)


REDELIVER_S = 0.05  # a swallowed Ctrl-C's second delivery, after the callback it landed in has returned


def _redeliver_swallowed_interrupts() -> None:
    """A Ctrl-C whose handler runs inside a callback Python cannot raise from (importlib's module-lock weakref
    callback while the command imports, a ``__del__``) was printed as "Exception ignored in: ... KeyboardInterrupt"
    with a traceback, and lost: the command went on.  Such an interrupt is delivered again to the main thread, where
    it raises in ordinary code (the one "interrupted" line), and is not printed.  Delivered from another thread a
    moment later: delivered at once, the handler would run inside this hook, which cannot raise either; one that
    lands in such a place again comes back here."""
    import _thread

    before = sys.unraisablehook

    def again() -> None:
        time.sleep(REDELIVER_S)  # the main thread has left the hook and the callback by then
        _thread.interrupt_main()

    def hook(unraisable) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            threading.Thread(target=again, name="attnviz-interrupt", daemon=True).start()
            return
        before(unraisable)

    if getattr(before, "_attnviz_redelivers", False):
        return
    hook._attnviz_redelivers = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def one_line(text: str) -> str:
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


# C0 controls except tab / newline / carriage return (progress bars), DEL and C1 controls: shown escaped
_UNSAFE = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)]}


class TerminalSafe:
    """A text stream wrapper that escapes control characters (ESC sequences could rewrite the terminal)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, s: str) -> int:
        return self._stream.write(s.translate(_UNSAFE))

    def __getattr__(self, name):
        return getattr(self._stream, name)


if __name__ == "__main__":
    sys.exit(main(leave=True))
