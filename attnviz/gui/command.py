"""``attnviz open [MODEL]``: the desktop app (plain ``attnviz`` opens the bundled demo model)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from attnviz.core.notice import say
from attnviz.core.numbers import as_typed_arg, spelled
from attnviz.core.view import IMAGE_BASES, IMAGE_FROM, LINK_CUTS, SCALES
from attnviz.runtime.commands.common import (
    GENERATE_HELP,
    MAX_TOKENS_HELP,
    TEXT_FILE_HELP,
    DeprecatedAlias,
    SeveralImages,
    SeveralTexts,
    add_variant_argument,
)
from attnviz.runtime.request import AnalyzeRequest

MAX_WINDOW_SIDE = 16384  # pixels a side of the window --size asks for (a 1 GB screenshot at most)

# Qt's loop runs the window: a SIGTERM raised as an exception in whichever slot ran next would not stop it cleanly
# (the CLI raises SIGTERM as a Ctrl-C in every other command); it ends the window as it always did
OWN_SIGNALS = True
HELP = "open the desktop app on an ONNX model (default: the bundled demo) and explore its attention"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        nargs="?",
        help="ONNX model, .npz attention maps or an attnviz corpus results folder (default: bundled demo model); an "
        "image goes in --image",
    )
    p.add_argument(
        "--text",
        action=SeveralTexts,
        help="input text; again for several candidate texts, each scored against the image(s) (a dual encoder: CLIP, "
        "SigLIP; its texts box shows them one a line)",
    )
    p.add_argument("--text-file", metavar="FILE", help=TEXT_FILE_HELP)
    p.add_argument("--text-pair", dest="text_pair", help="second sentence for pair models")
    p.add_argument(
        "--image",
        action=SeveralImages,
        help="image file for vision / captioning models; again for several images in one prompt (a vision–language "
        "model), or several images each scored against the text(s) (a dual encoder: CLIP, SigLIP)",
    )
    p.add_argument("--audio", metavar="FILE", help="sound file (WAV, FLAC, OGG) for speech models (Whisper)")
    p.add_argument("--generate", type=int, default=None, metavar="N", help=GENERATE_HELP)  # extract's words
    p.add_argument(
        "--beams",
        type=int,
        default=None,
        metavar="K",
        help="beam search with K beams for --generate (default 1: greedy); the beam box switches the hypotheses",
    )
    p.add_argument(
        "--tokenizer", metavar="FILE", help="a Hugging Face tokenizer.json (default: metadata, or beside the model)"
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help=MAX_TOKENS_HELP,
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        metavar="S",
        help="keep only the first S seconds of each audio clip (a clip longer than the model's window is refused)",
    )
    add_variant_argument(p)
    p.add_argument(
        "--provider", choices=("auto", "cpu", "cuda"), default="auto", help="onnxruntime device (default auto)"
    )
    p.add_argument(
        "--memory",
        choices=("auto", "dense", "ondemand"),
        default="auto",
        help="dense keeps all maps; ondemand keeps Q/K and recomputes a head when it is shown (long inputs); auto "
        "(default) picks by memory, as extract and figure do",
    )
    p.add_argument(
        "--screenshot", metavar="PATH", help="render offscreen once the first result is shown, save a PNG and exit"
    )
    p.add_argument(
        "--view",
        default=None,
        help="tab to show first (overview, heatmap, links, alignment, image, audio, stats; default: audio for a speech "
        "model, else overview)",
    )
    p.add_argument("--size", default="1400x900", help="window size WxH (default 1400x900)")
    p.add_argument(
        "--layer", type=int, default=None, help="layer to focus first (alone: the mean over its heads, as figure's)"
    )
    p.add_argument("--head", type=int, default=None, help="head to focus first")
    p.add_argument(
        "--block",
        default=None,
        help="block to focus first: its index (0 = the first) or its name, as `figure --block` takes it "
        '("encoder self", "decoder cross", "encoder self stage 2")',
    )
    p.add_argument(
        "--aggregate",
        "--agg",
        dest="mode",
        choices=("head", "mean", "max", "min", "rollout"),
        default=None,
        help="show one head, an aggregate over heads (of --layer, else the last layer) or rollout (from the first "
        "layer up to --layer, else the last), as `figure --aggregate` draws them (default: as the window opens the "
        "model: its declared alignment head, else the mean over the last layer's heads)",
    )
    p.add_argument(
        "--image-base",
        dest="image_base",
        choices=tuple(IMAGE_BASES),
        default=None,
        help="Image regions: what lies under the heat (default grey; colour keeps the image's colours; none)",
    )
    p.add_argument(
        "--image-from",
        dest="image_from",
        choices=tuple(IMAGE_FROM),
        default=None,
        help="Image regions: whose attention lies over the image, the words' (default), the vision tower's own "
        "(patch to patch) or its attention-pooling head's (SigLIP's)",
    )
    p.add_argument(
        "--link-cut",
        dest="link_cut",
        choices=tuple(LINK_CUTS),
        default=None,
        help="Token links: measure each link against its query token's strongest (row, the default: every token of a "
        "long input has its links) or against the map's top weight (map), as `figure --link-cut`",
    )
    p.add_argument(
        "--scale",
        choices=tuple(SCALES),
        default=None,
        help="colour scale, as `figure --scale` takes it: fixed 0-1 (the token maps' default), shared by the block's "
        "heads, map (stretched to each map: Image regions' default) or row (each query row stretched to its maximum); "
        "the token maps' and Image regions' both",
    )
    p.add_argument(
        "--vmax",
        type=as_typed_arg,  # (kept as typed: its refusal shows 0.0000001, not Python's 1e-07)
        default=None,
        help="top of the colour scale by hand (the colour-top box), as `figure --vmax`: every view that draws a "
        "colour scale reads it (default: the one --scale gives)",
    )
    p.add_argument(
        "--log",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="logarithmic colour scale (the log box), as `figure --log`",
    )
    p.add_argument(
        "--padding",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="speech model: the maps show the encoder frames after the clip too, the padding of the model's window "
        "(the 'show padding' box), as `figure --padding`",
    )
    p.add_argument(
        "--picture",
        type=int,
        metavar="N",
        default=None,
        help="Image regions of a prompt that held several images: show image N (from 1; default the first)",
    )
    p.add_argument(
        "--frame",
        type=int,
        metavar="N",
        default=None,
        help="Head map of a vision tower that runs each tile / image by itself: show frame N (from 1; default the first)",
    )
    p.add_argument(
        "--mode",
        dest="mode",
        choices=("head", "mean", "max", "min", "rollout"),
        action=DeprecatedAlias,
        new="--aggregate",
        help=argparse.SUPPRESS,
    )  # --mode is the memory mode in extract / figure


def input_values(args) -> dict:
    """The input flags given, as the input panel's fields: several ``--text`` (a dual encoder's candidate texts)
    stay a list, the texts box's lines (InputPanel.set_values)."""
    values = {
        k: getattr(args, k)
        for k in ("text", "text_pair", "image", "audio", "generate", "beams")
        if getattr(args, k) is not None
    }
    return values


# the input flags (as typed) a model run reads, and nothing else: the window's input panel
_INPUT_FLAGS = {"text": "--text", "text_pair": "--text-pair", "image": "--image", "audio": "--audio",
                "generate": "--generate", "beams": "--beams", "tokenizer": "--tokenizer", "max_tokens": "--max-tokens",
                "max_seconds": "--max-seconds", "variant": "--variant"}  # fmt: skip
# what is opened without a model run, by rules.file_kind: the inputs given would be dropped without a word
_NO_RUN = {
    "maps": "holds attention maps already computed (by 'attnviz extract'); no model runs",
    "corpus": "is a corpus run's results, already computed; no model runs",
}


def _inputs_read(args, target) -> None:
    """AttnvizError where input flags are given and no model runs on them (``open MAPS.npz --text-file F``, or no
    demo model bundled): the window opened the maps and dropped them without a word.  ``figure --maps M --text T``
    refuses them alike."""
    from attnviz import AttnvizError
    from attnviz.app.rules import file_kind

    given = [flag for dest, flag in _INPUT_FLAGS.items() if getattr(args, dest, None) is not None]
    if getattr(args, "text_file", None) is not None:  # read into args.text (cli.text_from_file): named as typed
        given = ["--text-file" if flag == "--text" else flag for flag in given]
    if not given:
        return
    if target is None:
        raise AttnvizError(f"no model to run {', '.join(given)} on (the bundled demo models are missing); pass a MODEL")
    try:
        kind = file_kind(target)
    except AttnvizError:
        return  # the window names what it cannot open, as without inputs
    if kind in _NO_RUN:
        raise AttnvizError(f"{target.name} {_NO_RUN[kind]}; drop {', '.join(given)}")


def _unread_flags(args) -> str | None:
    """The note naming the view flags given that the opening tab (``--view``) does not show (core.view_flags); None
    without ``--view``: the flags set the window's state, which the tabs that read them show."""
    from attnviz.core.view_flags import VIEW_FLAGS, unread_note
    from attnviz.core.view_names import view_key

    key = view_key(args.view) if args.view else None
    if key is None:
        return None
    return unread_note(key, [f.dest for f in VIEW_FLAGS if getattr(args, f.dest, None) is not None], window=True)


def focus_from_args(args) -> dict:
    """The selection ``--block/--layer/--head/--aggregate/--frame/--picture/...`` ask for, as the keywords of
    ``session.select``; what is not given stays the window's default.  Layer ranges as ``figure`` reads the same
    flags (``figures.select.layer_span``): an aggregate over heads covers ``--layer`` alone, rollout runs from
    the first layer up to ``--layer`` (else up to the last, the window's default layer)."""
    from attnviz import AttnvizError
    from attnviz.core.view import check_vmax

    focus = {
        k: getattr(args, k)
        for k in ("block", "layer", "head", "mode", "image_base", "image_from", "log", "link_cut", "padding")
        if getattr(args, k) is not None
    }
    if args.scale is not None:  # as figure's --scale: the image view's own box too
        focus.update(scale=args.scale, image_scale=args.scale, kind_scale=False)  # (the Overview's too)
    if args.vmax is not None:  # as figure's --vmax: the view model's check, the box's words
        focus["vmax"] = check_vmax(args.vmax, "--vmax")
    if args.frame is not None:
        if args.frame < 1:
            raise AttnvizError(f"--frame {args.frame}: frames count from 1; give --frame N")
        focus["frame"] = args.frame - 1
    if args.picture is not None:
        if args.picture < 1:
            raise AttnvizError(f"--picture {args.picture}: images count from 1; give --picture N")
        focus["picture"] = args.picture - 1
    if "head" in focus:
        focus.setdefault("mode", "head")  # a head asked for is shown, whatever aggregate the window opens on
    if args.mode in ("mean", "max", "min", None) and args.layer is not None and args.head is None:
        focus.update(layer_lo=args.layer, layer_hi=args.layer)  # the aggregate over that layer's heads
        # --layer alone: figure's mean over that layer's heads (a model opening on its declared alignment head
        # showed that head of --layer instead)
        focus.setdefault("mode", "mean")
    if args.mode == "rollout":  # rollout of the last layer alone was that layer's map plus the residual
        focus["layer_lo"] = 0
        if args.layer is not None:
            focus["layer_hi"] = args.layer
    return focus


def figure_focus(result, focus: dict, view: str | None, sel) -> dict:
    """``focus`` as ``figure`` reads the same flags: without ``--block``, the block it draws for heads, a layer or
    an aggregate (:func:`attnviz.figures.select.unnamed_block`, one rule for both: the declared alignment head's);
    an aggregate over heads without ``--layer``, over the block's last layer's heads (a model opening on its
    declared head had every layer's range, 0..last).  ``sel``: the window's selection (what is not given)."""
    from attnviz.core.view_names import view_key
    from attnviz.figures import select

    focus = dict(focus)
    if "block" not in focus and any(k in focus for k in ("head", "layer", "mode")):
        block = select.unnamed_block(result, view_key(view) if view else "heatmap")
        if block is not None:
            focus["block"] = block
    if focus.get("mode") in ("mean", "max", "min") and "layer_lo" not in focus:
        last = select.resolve_block(result, focus.get("block"), sel.block)[1].n_layers - 1
        focus.update(layer_lo=last, layer_hi=last)
    return focus


def check_focus(result, focus: dict, sel) -> int:
    """``--block/--layer/--head`` against the first result, with ``figure``'s checks and messages: the session
    would clamp them, and a screenshot would show another head than asked for with exit code 0.  What is not
    given is the selection's (``sel``).  Returns the block's index (``--block`` may name it)."""
    from attnviz.figures import select

    bi, b = select.resolve_block(result, focus.get("block"), sel.block)
    layer = select.check_layer(b, focus["layer"]) if focus.get("layer") is not None else min(sel.layer, b.n_layers - 1)
    if focus.get("head") is not None:
        select.check_head(b, layer, focus["head"])
    if focus.get("frame") is not None:  # a frame the tower block does not have: named, not clamped
        from attnviz.core.view import check_frame

        check_frame(result, sel.with_(block=bi, frame=focus["frame"]))
    if focus.get("picture") is not None:  # an image the prompt did not hold: named, not clamped
        from attnviz.core.view import pictured

        pictured(result, focus["picture"])
    return bi


@contextmanager
def _ctrl_c_closes(win, app) -> Iterator[list[bool]]:
    """While the window runs, Ctrl-C in the terminal closes it as its close button does (session and layout saved)
    and the command ends "interrupted"; the list yielded is non-empty once it did.  Without this the signal raised
    KeyboardInterrupt inside whichever Python slot Qt ran next (a traceback on stderr) and the window stayed open.
    Qt's loop runs no Python while idle: the handler runs at the next Python call, the collector's 500 ms timer at
    the latest (gcguard)."""
    import signal
    import threading

    interrupted: list[bool] = []
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set a handler
        yield interrupted
        return

    def on_interrupt(*_) -> None:
        interrupted.append(True)
        win.close()
        app.quit()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def run(args) -> int:
    import sys
    from pathlib import Path

    from attnviz import AttnvizError
    from attnviz.gui.app import (
        demo_model,
        drop_scratch,
        ensure_platform,
        make_app,
        quiet_plugin_limits,
        scratch_settings,
    )

    target = Path(args.model) if args.model else demo_model()
    if target is not None and not target.exists():
        from attnviz.core.untrusted import missing
        from attnviz.runtime.folder import hub_name_hint

        why = missing(target)  # (a link that leads nowhere says so, and what to do, itself)
        # what `open` takes as its file (an image goes in --image: the positional one is refused)
        kinds = (
            "; give an .onnx model or an export folder, an .npz file from 'attnviz extract', or an 'attnviz corpus' "
            "results folder"
            if why == "no such file"
            else ""
        )
        raise AttnvizError(hub_name_hint(target) or f"{target}: {why}{kinds}")
    _inputs_read(args, target)
    if args.screenshot:
        shot = Path(args.screenshot)
        if shot.suffix.lower() != ".png":
            raise AttnvizError(f"--screenshot {shot}: use a .png file name")
        if not (shot.parent if str(shot.parent) else Path(".")).is_dir():
            raise AttnvizError(
                f"--screenshot {shot}: folder {shot.parent} does not exist; create it or choose another --screenshot"
            )
        from attnviz.core.writes import guard

        opened = {
            "the file it opens": target,
            "the --image file": args.image,
            "the --audio file": args.audio,
            "the --tokenizer file": args.tokenizer,
            "the --text-file": getattr(args, "text_file", None),
        }
        guard(opened, {"--screenshot": shot})
    # the input flags' values get the check the window's input panel and `extract` get (one wording)
    given_beams = args.beams if args.beams is not None and args.generate is not None else 1
    AnalyzeRequest(
        generate=args.generate or 0, max_tokens=args.max_tokens, beams=given_beams, max_seconds=args.max_seconds
    )
    if args.beams is not None and args.generate is None:  # its range alone: the window generates its default steps
        AnalyzeRequest(generate=1, beams=args.beams)
    if args.audio and not Path(args.audio).exists():
        raise AttnvizError(f"--audio {args.audio}: no such file; give a WAV, FLAC or OGG file", param="audio")
    if args.audio:  # a FIFO or a folder is named as what it is ("no such file" of a path that is there misled)
        from attnviz.core.untrusted import regular_file

        regular_file(args.audio, "--audio")
    if args.tokenizer and not Path(args.tokenizer).exists():
        raise AttnvizError(f"--tokenizer {args.tokenizer}: no such file; give a Hugging Face tokenizer.json")
    if args.tokenizer:  # a folder, a pipe: refused now, in the check's words; its contents when the model opens
        from attnviz.core.untrusted import regular_file

        regular_file(args.tokenizer, "--tokenizer")
    try:
        from attnviz.core.numbers import whole

        w, h = (whole(x) for x in args.size.lower().split("x"))
    except ValueError:
        raise AttnvizError(f"--size {args.size}: use WxH, e.g. 1400x900") from None
    if not (0 < w <= MAX_WINDOW_SIDE and 0 < h <= MAX_WINDOW_SIDE):
        # 100000x100000 made Qt print thousands of "QPainter::begin: Paint device returned engine == 0" lines (a
        # 40 GB pixmap it could not allocate) and the screenshot "could not write", naming neither the size nor a fix
        raise AttnvizError(f"--size {args.size}: give a width and height in 1..{MAX_WINDOW_SIDE} pixels, e.g. 1400x900")

    focus_from_args(args)  # the focus flags' own checks (--vmax 0, --frame 0) before any window shows
    unread = _unread_flags(args)
    if unread and not args.screenshot:  # (a screenshot's run says it with its result: a failed one is one line)
        say(unread)
    # the window system is checked once the arguments are: a path that is not there is the problem to name, even
    # where there is no display (a typo over ssh got "no X display" first)
    ensure_platform(bool(args.screenshot))
    app = make_app()
    if args.screenshot:
        quiet_plugin_limits()
    from attnviz.gui import main_window
    from attnviz.gui.main_window import MainWindow
    from attnviz.gui.screenshot import ScreenshotTaker

    scratch = scratch_settings() if args.screenshot else None  # a scripted run: the user's settings stay theirs
    win = MainWindow(provider=args.provider, settings=scratch)
    if args.tokenizer:
        win.tokenizer = Path(args.tokenizer)
    win.variant = args.variant
    win.memory = args.memory
    if args.max_seconds:  # the input panel's field (shown once a speech model opens)
        win.inputs.set_values(max_seconds=args.max_seconds)
    if args.screenshot:  # the window's message becomes this command's line: it names the flags it was given
        from attnviz.core.setting_words import FLAGS

        win.wording = FLAGS
    if args.max_tokens:
        win.inputs.set_values(max_tokens=args.max_tokens)
    win.resize(w, h)
    if args.view:
        if args.view.lower() == "head":  # the Head map tab is "heatmap", as in `attnviz figure --view`
            say("--view head is deprecated; use --view heatmap")
        win.pin_view(args.view)
    win.show()
    focus = focus_from_args(args)
    if focus:

        def apply_focus():
            win.result_shown.disconnect(apply_focus)
            if "image_from" in focus:  # first: its block is then selected, and --layer/--head are that block's
                win.image_regions.choose_from(focus["image_from"])
            try:
                from attnviz.core.view_flags import VIEW_FLAGS, check_model_reads

                # a flag no view of this model reads (--picture of a text model) is refused, as figure does
                check_model_reads(
                    win.session.result, [f.dest for f in VIEW_FLAGS if getattr(args, f.dest, None) is not None]
                )
                asked = figure_focus(win.session.result, focus, args.view, win.session.sel)  # figure's, same flags
                block = check_focus(win.session.result, asked, win.session.sel)
            except AttnvizError as e:  # as `figure` does: a layer that is not there is named, not clamped
                win.show_error(str(e), param=e.param)
                return
            win.alignment.keep_selection()  # --layer/--head win over the model's declared alignment head
            win.session.select(**(asked | {"block": block} if "block" in asked else asked))  # a name: its index

        win.result_shown.connect(apply_focus)  # connected before the screenshot, so it is applied first
    if args.max_seconds:

        def sound_read():
            # the max seconds field is a speech model's only: for any other model its value was dropped unsaid
            # (`extract` and `figure` refuse it in the runtime: builders._audio)
            win.result_shown.disconnect(sound_read)
            from attnviz.app.rules import takes_audio

            model = win.session.model
            if model is not None and not takes_audio(model):
                win.show_error(
                    f"--max-seconds {spelled(args.max_seconds)}: {model.path.name} takes no sound to cut; leave it out",
                    param="max_seconds",
                )

        win.result_shown.connect(sound_read)
    values = input_values(args)
    taker = ScreenshotTaker(win, Path(args.screenshot), args.view) if args.screenshot else None
    from attnviz.gui import restore

    last = restore.load(win.settings) if not (args.model or args.screenshot or values or focus or args.view) else None
    if last is not None:  # plain `attnviz`: where the user left off
        restore.restore(win, last)
    elif target is None:
        win.statusBar().showMessage(
            "No bundled demo model found: open one with File ▸ Open model… or drop an .onnx file here."
        )
        if taker is not None:
            taker.fail_later("no model to open: the bundled demo models are missing; pass a MODEL")
    elif target.suffix.lower() == ".onnx":
        win.open_model(target, **values)
    else:
        win.open_path(target, **values)  # a folder (an export) opens as a model with these inputs
    with _ctrl_c_closes(win, app) as interrupted:
        app.exec()
    # a model run in the child process stops on cancel; a job stuck in Python code cannot be stopped, and waiting
    # for it at interpreter exit would hang `open --screenshot` forever: leave without it
    win.workers.cancel()
    # a closed window (app.quit closes it in Qt 6, Ctrl-C closes it) already gave its jobs 5 s: a stuck one is only
    # asked again whether it is done, not waited for another 5 s (`open --screenshot` past its time took 10 s more)
    grace = 0 if win.waited_on_close else main_window.CLOSE_GRACE_MS
    stuck = not (win.workers.wait(grace) and win.stats.workers.wait(min(grace, 1000)))
    if scratch is not None:
        drop_scratch(scratch)
    error = taker.error if taker is not None and not interrupted else None
    code = 130 if interrupted else 2 if error else 0
    message = None
    if interrupted:
        message = "attnviz: interrupted"
        if not stuck:
            raise KeyboardInterrupt  # the command line's one line and exit status 130, as every command's
    if error:
        message = f"attnviz: error: {error}"
    elif taker is not None:
        message = f"saved {taker.path}"
        if unread:
            say(unread)
    if stuck:
        import os
        import sys

        print(message or "", file=sys.stderr if code else sys.stdout, flush=True)
        os._exit(code)
    if error:
        raise AttnvizError(error)
    if message:
        print(message)
    return 0
