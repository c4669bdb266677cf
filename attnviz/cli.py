"""Command line: ``attnviz [open|inspect|extract|figure|train|eval] ...``.

Each subcommand lives in its own module exposing ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; modules keep heavy imports (torch, Qt, onnxruntime) inside ``run`` so
``attnviz --help`` stays fast and headless commands never load Qt.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from attnviz import AttnvizError, __version__

# name -> module implementing it (registry, not if/elif)
COMMANDS = {
    "open": "attnviz.gui.command",
    "inspect": "attnviz.runtime.commands.inspect",
    "extract": "attnviz.runtime.commands.extract",
    "corpus": "attnviz.corpus.command",
    "figure": "attnviz.figures.command",
    "train": "attnviz.training.commands.train",
    "eval": "attnviz.training.commands.evaluate",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnviz", description="Find, run and inspect attention in ONNX transformer models.")
    p.add_argument("--version", action="version", version=f"attnviz {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, modname in COMMANDS.items():
        try:
            mod = importlib.import_module(modname)
        except ImportError as e:  # a part not installed (e.g. training extra): list it, explain on use
            sp = sub.add_parser(name, help=f"(unavailable: {e})")
            sp.set_defaults(_unavailable=f"'attnviz {name}' is unavailable: {e}")
            continue
        sp = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(sp)
        sp.set_defaults(_run=mod.run)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # plain `attnviz` (or `attnviz MODEL.onnx --text ...`, `attnviz --screenshot x.png`): the app
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv = ["open", *argv]
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_unavailable", None):
        print(f"attnviz: {args._unavailable}", file=sys.stderr)
        return 2
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except AttnvizError as e:
        print(f"attnviz: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnviz: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # never a traceback to the user; ATTNVIZ_DEBUG=1 shows it
        if os.environ.get("ATTNVIZ_DEBUG"):
            raise
        print(f"attnviz: error: {type(e).__name__}: {e} (set ATTNVIZ_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
