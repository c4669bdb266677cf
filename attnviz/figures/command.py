"""``attnviz figure``: publication figures (PDF/SVG/PNG) of any view, headless, with a recipe beside each.

Examples::

  attnviz figure models/translation.onnx --text "ἐν ἀρχῇ ἦν ὁ λόγος" --view heatmap --layer 2 --head 1 --width single --out fig.pdf
  attnviz extract models/translation.onnx --text "ἐν ἀρχῇ ἦν ὁ λόγος" --generate 8 --out maps.npz
  attnviz figure --maps maps.npz --view overview --out overview.svg
  attnviz figure --recipe fig.pdf.recipe.json              # the same bytes again
  attnviz figure models/translation.onnx --text "ἐν ἀρχῇ ἦν ὁ λόγος" --all-heads --out heads/ --format png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnviz import AttnvizError
from attnviz.core.notice import say
from attnviz.core.numbers import as_typed_arg, whole
from attnviz.core.quoted import quoted
from attnviz.figures.spec import (
    AGGREGATES,
    FORMATS,
    IMAGE_BASES,
    IMAGE_FROM,
    LINK_CUTS,
    SCALES,
    VIEW_HELP,
    VIEWS,
    WIDTH_PRESETS,
    check_vmax,
)

# what a source file is called in a one-line refusal, as extract names it (runtime.inputs, runtime.audio)
_SOURCE_WORDS = {"image": "image", "audio": "audio", "feeds": "inputs", "tokenizer": "tokenizer"}
# the process may end without the interpreter's teardown once the command returns (cli._leave_at_once): every figure
# and recipe is encoded in memory and written through atomic_write_bytes (a `with open` closed before the rename), so
# nothing is left half-written; the teardown freed matplotlib's, numpy's and onnx's modules one by one, figtail22
LEAVES_AT_ONCE = True

HELP = "export a publication figure (PDF/SVG/PNG) of a view, with a JSON recipe that regenerates it"

# FigureSpec field -> argparse dest; None on the command line means "not given" (keeps recipe values)
_SPEC_ARGS = (
    "view",
    "block",
    "layer",
    "head",
    "heads",
    "agg",
    "query",
    "cmap",
    "width",
    "width_in",
    "dpi",
    "hide_special",
    "title",
    "vmax",
    "font_size",
    "keep",
    "log",
    "step",
    "rows",
    "image_base",
    "scale",
    "picture",
    "image_from",
    "frame",
    "span",
    "key_span",
    "link_cut",
    "padding",
)


def _heads(text: str) -> list[int]:
    from attnviz.core.comma_list import EmptyItem, comma_items

    try:
        items = comma_items(text)
    except EmptyItem as e:  # '0,,1' drew heads 0 and 1, '1,' head 1: a head left out is named, not skipped
        raise argparse.ArgumentTypeError(f"{e}; give a head or a comma list like 0,3,5") from None
    try:
        return [whole(t) for t in items]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"head must be a number or a comma list like 0,3,5, not {quoted(text)}"
        ) from None


def _layer_range(text: str) -> tuple[int, int]:
    try:
        lo, hi = (whole(t) for t in text.split("-", 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"layer range must look like 2-5, not {quoted(text)}") from None
    return lo, hi


def _span(text: str) -> list[int]:
    try:
        lo, hi = (whole(t) for t in text.split("-", 1))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"positions must look like 300-399 (whole numbers in the digits 0-9, counted from 0), not {quoted(text)}"
        ) from None
    return [lo, hi]


def add_arguments(p: argparse.ArgumentParser) -> None:
    from attnviz.runtime.commands.common import add_input_arguments, add_variant_argument

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "views:\n"
        + "\n".join(f"  {k:<10} {v}" for k, v in VIEW_HELP.items())
        + "\n\nexamples (the translation demo, from a checkout's root; each runs as shown, in this order):"
        + __doc__.split("Examples::")[1]
    )
    p.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help="ONNX model file; a .npz is taken as --maps (as attnviz open takes it), a .json as --recipe",
    )
    p.add_argument("--maps", metavar="MAPS.npz", help="attention maps written by 'attnviz extract' (no model run)")
    p.add_argument(
        "--recipe",
        metavar="R.json",
        help="regenerate the figure a recipe describes (view options given here override it)",
    )
    add_input_arguments(p, model_required=False, several_images=True, several_texts=True)
    add_variant_argument(p)
    # not given: as many steps as the window takes for this kind of model (core.steps_default.default_generate)
    p.set_defaults(generate=None, beams=None)  # --beams: recorded in a recipe only when given
    view = p.add_argument_group("view")
    view.add_argument(
        "--view",
        choices=VIEWS,
        help="what to draw (default: the view the window opens the model on: audio for a speech model, else "
        "heatmap; see the list below)",
    )
    view.add_argument("--block", help='attention block: index or name like "encoder self", "decoder cross"')
    view.add_argument("--layer", type=int, help="layer (default: the last)")
    view.add_argument(
        "--layers", type=_layer_range, metavar="LO-HI", help="aggregate heads over a layer range (rollout: from LO)"
    )
    view.add_argument(
        "--head",
        type=_heads,
        metavar="H[,H...]",
        help="head, or several heads to overlay (links view); alignment view without --head/--layer/--aggregate: "
        "the model's declared alignment head",
    )
    view.add_argument(
        "--aggregate", "--agg", dest="agg", choices=AGGREGATES, help="aggregate the heads instead (default mean)"
    )
    view.add_argument(
        "--query",
        type=int,
        help="query position (image, links, heatmap highlight); image view default: as the window opens it (a "
        "captioner's most focused word, the word of --step); audio view of an encoder alone (wav2vec2): the frame, "
        "default its loudest, as the window opens it",
    )
    view.add_argument(
        "--batch-index",
        type=int,
        metavar="B",
        help="batch row to draw when the input holds several (default 0; rows count from 0)",
    )
    view.add_argument(
        "--step", type=int, help="generation step: show what existed when generated word STEP (0-based) was chosen"
    )
    view.add_argument(
        "--hide-special",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="drop special tokens and renormalise rows",
    )
    view.add_argument(
        "--rows",
        choices=("predict", "input"),
        help="alignment rows: the decoder row that chose each word (predict) or the row reading it (input, Shift-Att); "
        "default: the model's declared convention (attnviz.alignment), else predict",
    )
    view.add_argument(
        "--image-base",
        choices=tuple(IMAGE_BASES),
        help="image and strip views: what lies under the heat (default: colour under a captioner's words, grey "
        "elsewhere)",
    )
    view.add_argument(
        "--keep",
        type=float,
        metavar="F",
        help="keep, per row, the largest weights holding this mass fraction (e.g. 0.9)",
    )
    view.add_argument("--log", action=argparse.BooleanOptionalAction, default=None, help="logarithmic colour scale")
    view.add_argument(
        "--scale",
        choices=tuple(SCALES),
        help="top of the colour scale: fixed 0-1 (default, as in the window), shared by the block's heads, map "
        "(stretched to each map's maximum), or row (each query row stretched to its own maximum: long causal maps); "
        "with --span / --key-span, shared and map take the window's cells only; the colour bar says which. Image view: map by default, as in the window; "
        "shared is the largest weight any head of the block gives the image from this query, so heads compare",
    )
    view.add_argument(
        "--picture",
        type=int,
        metavar="N",
        help="image view of a prompt that held several images: draw image N (from 1; default the first)",
    )
    view.add_argument(
        "--frame",
        type=int,
        metavar="N",
        help="heatmap of a vision tower that runs each tile / image by itself (Idefics3, SmolVLM, Qwen2-VL's images): "
        "draw frame N's map (from 1, as the Head map's frame box lists them; default the first)",
    )
    view.add_argument(
        "--span",
        type=_span,
        metavar="LO-HI",
        help="heatmap / alignment / links: draw only query positions LO..HI (from 0, as --query counts them; a "
        "self-attention map's keys too): a window of a long map, its tokens all labelled (links: the lines "
        "between the window's tokens)",
    )
    view.add_argument(
        "--key-span",
        dest="key_span",
        type=_span,
        metavar="LO-HI",
        help="heatmap / alignment / links: draw only key positions LO..HI (default: --span's for a self-attention map, "
        "else every key)",
    )
    view.add_argument(
        "--image-from",
        dest="image_from",
        choices=tuple(IMAGE_FROM),
        help="image view: whose attention lies over the image, the words' (default), the vision tower's own "
        "(patch to patch; as --block with the vision block) or its attention-pooling head's (SigLIP's)",
    )
    view.add_argument(
        "--link-cut",
        dest="link_cut",
        choices=tuple(LINK_CUTS),
        help="links view: draw each query token's strongest links, measured against its own strongest (row, the "
        "default, as in the window: every token of a long input has its links) or against the top weight of the "
        "map (map: links compare across tokens; a long causal input's later tokens then show none)",
    )
    view.add_argument(
        "--padding",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="speech model: draw the encoder frames after the clip too, the silent padding of the model's window "
        "(Whisper's 30 s); by default a map's frame axes end with the clip, its title saying so",
    )
    view.add_argument("--cmap", help="matplotlib colormap (default viridis; magma for image overlays)")
    view.add_argument(  # (the number kept as typed: its refusal shows 0.0000001, not Python's 1e-07)
        "--vmax", type=as_typed_arg, help="top of the colour scale by hand (default: the one --scale gives)"
    )
    view.add_argument("--title", help='figure title (default: model, block, layer, head; "" for none)')
    size = p.add_argument_group("size and output")
    size.add_argument(
        "--width", choices=tuple(WIDTH_PRESETS), help="column width preset: single 3.5 in, double 7.16 in"
    )
    size.add_argument("--width-in", type=float, metavar="W", help="figure width in inches")
    size.add_argument(
        "--dpi",
        type=int,
        help="raster resolution (default 300): PNG width = width x dpi; a PDF or SVG embeds a map a pixel a cell, "
        "pooled where it has more cells than pixels at this dpi",
    )
    size.add_argument("--font-size", type=float, metavar="PT", help="tick-label size in points (default 7)")
    size.add_argument(
        "--out",
        help="output file .pdf/.svg/.png (with --all-heads: a folder, or a file name that each figure's layer and "
        "head extend: figs/attn.pdf writes figs/attn_L00_H00.pdf, ...)",
    )
    size.add_argument("--format", choices=FORMATS, help="file format for --all-heads into a folder (default png)")
    size.add_argument("--all-heads", action="store_true", help="one file per layer x head of the block")
    size.add_argument("--recipe-out", metavar="R.json", help="where to write the recipe (default OUT.recipe.json)")
    size.add_argument("--no-recipe", action="store_true", help="do not write a recipe")


# run options a recipe records besides the inputs (defaults as in attnviz.runtime.commands.common)
_OPTION_DEFAULTS = {
    "provider": "auto",
    "mode": "auto",
    "image_size": None,
    "image_mean": None,
    "image_std": None,
    "max_tokens": None,
    "batch_index": None,
}

# options a recipe records only when they were given (recipes written before them stay byte-identical)
_RECORDED_WHEN_GIVEN = ("max_seconds", "variant", "beams")


def _option(args, k):
    v = getattr(args, k, _OPTION_DEFAULTS[k])
    return list(v) if isinstance(v, (list, tuple)) else v


def _sources_from_args(args) -> dict:
    src = {
        "model": args.model,
        "maps": args.maps,
        "text": args.text,
        "text_pair": args.text_pair,
        "image": args.image,
        "audio": args.audio,
        "feeds": args.inputs,
        "tokenizer": args.tokenizer,
        "generate": args.generate,
    }
    src.update({k: _option(args, k) for k in _OPTION_DEFAULTS})
    for k in _RECORDED_WHEN_GIVEN:  # recorded only when given: other recipes stay as they were
        if getattr(args, k, None) is not None:
            src[k] = getattr(args, k)
    return src


def _sources_from_recipe(r: dict, args) -> dict:
    s, i, o = r["source"], r["inputs"], r.get("options") or {}

    def path(entry):
        return entry["path"] if entry else None

    src = {
        "model": path(s.get("model")),
        "maps": path(s.get("maps")),
        "text": i.get("texts") or i.get("text"),  # a dual encoder's several texts, else the one
        "text_pair": i.get("text_pair"),
        # one image's entry, or (one prompt's several images) each file in order
        "image": path(i.get("image")) or ([e["path"] for e in i["images"]] if i.get("images") else None),
        "audio": path(i.get("audio")),
        "feeds": path(i.get("feeds")),
        "tokenizer": path(i.get("tokenizer")),
        "generate": int(i.get("generate") or 0),
    }
    for k, d in _OPTION_DEFAULTS.items():  # an option given on the command line wins over the recipe's
        v = _option(args, k)
        src[k] = v if v != d else o.get(k, d)
    for k in _RECORDED_WHEN_GIVEN:
        v = getattr(args, k, None)
        v = o.get(k) if v is None else v
        if v is not None:
            src[k] = v
    return src


def _spec_overrides(args) -> dict:
    d = {}
    for k in _SPEC_ARGS:
        if k == "heads":
            continue
        v = getattr(args, k, None)
        if v is None:
            continue
        if k == "head":
            if len(v) == 1:
                d["head"], d["heads"] = v[0], None
            else:
                d["head"], d["heads"] = None, v
            continue
        if k == "vmax":  # its refusal names the flag as typed (FigureSpec's own check says 'vmax')
            v = check_vmax(v, "--vmax")  # (a plain float: the spec and its recipe hold the number)
        if k == "block" and isinstance(v, str) and v.strip().isascii() and v.strip().isdigit():
            v = int(v)  # (ASCII digits only: '٣'.isdigit() is true, and int() reads it as 3)
        d[k] = v
    if getattr(args, "layers", None) is not None:
        if args.layer is not None:
            raise AttnvizError("give --layer or --layers LO-HI, not both")
        d["layer_from"], d["layer"] = args.layers
    if "agg" in d:  # an aggregate on the command line replaces a recipe's head(s)
        d.setdefault("head", None)
        d.setdefault("heads", None)
    elif "head" in d:
        d["agg"] = None
    return d


def _view_defaults(spec_d: dict, args) -> None:
    """The view's own defaults a new figure records: the window's colour scale and link cut, the image's scale;
    a scale given by --scale wins over a kind of model's own overview scale (FigureSpec.kind_scale)."""
    if args.scale is not None and spec_d.get("view") == "overview":
        spec_d["kind_scale"] = False
    if not args.recipe:  # a new figure is on the window's default scale; a recipe keeps the one it was drawn on
        from attnviz.core.view import DEFAULT_SCALE

        spec_d.setdefault("scale", DEFAULT_SCALE)
        if spec_d.get("view") == "links":  # the window's cut, recorded (a recipe without one: the map's top)
            from attnviz.core.view import DEFAULT_LINK_CUT

            spec_d.setdefault("link_cut", DEFAULT_LINK_CUT)
    _image_scale(spec_d, args)


def _image_scale(spec_d: dict, args) -> None:
    """The image view's colour scale (FigureSpec.image_scale): --scale, else (a new figure) the window's default; a
    recipe without one keeps the stretched scale it was drawn on, which --log then applies to."""
    if spec_d.get("view") != "image":
        return
    if args.scale is not None:
        spec_d["image_scale"] = args.scale
    elif not args.recipe:  # the window's default over an image: each map stretched (palette.IMAGE_DEFAULT_SCALE)
        from attnviz.core.view import IMAGE_DEFAULT_SCALE

        spec_d["image_scale"] = IMAGE_DEFAULT_SCALE
    elif args.log is not None and spec_d.get("image_scale") is None:
        spec_d["image_scale"] = "map"


def _progress(i: int, n: int, label: str, stream=None) -> None:
    stream = stream or sys.stderr
    width = 30
    done = int(width * i / max(n, 1))
    end = "\n" if i >= n else ""
    stream.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label:<14}{end}")
    stream.flush()


def _all_heads_targets(out: str, fmt: str | None, view: str, block_label: str) -> tuple[Path, str, str]:
    """(folder, name prefix, format) for --all-heads; OUT is a folder or a pattern like figs/attn.pdf."""
    p = Path(out)
    suffix = p.suffix.lower().lstrip(".")
    if suffix in FORMATS:
        if fmt and fmt != suffix:
            raise AttnvizError(f"--format {fmt} contradicts --out {out}; drop one")
        return (p.parent if str(p.parent) else Path(".")), p.stem + "_", suffix
    if suffix and not p.is_dir():
        raise AttnvizError(f"--out {out}: end it in .pdf/.svg/.png or give a folder for --all-heads")
    return p, f"{view}_{block_label.replace(' ', '-')}_", fmt or "png"


def _recipe_clashes(args) -> list[tuple[str, object]]:
    """(flag as typed, its value) of each source or input a recipe names itself."""
    text_flag = "--text-file" if getattr(args, "text_file", None) else "--text"
    flags = {"model": "MODEL", "maps": "--maps", "text": text_flag, "text_pair": "--text-pair", "image": "--image",
             "audio": "--audio", "inputs": "--inputs", "tokenizer": "--tokenizer", "generate": "--generate"}  # fmt: skip
    return [(flag, getattr(args, k, None)) for k, flag in flags.items()]


def _maps_take_no_inputs(args) -> None:
    """``--maps`` with input flags: one line naming those given as typed (``--text-file``, not load_result's list of
    every input flag), as ``open MAPS.npz --text-file F`` does."""
    given = [flag for flag, value in _recipe_clashes(args) if value and flag not in ("MODEL", "--maps")]
    given += [flag for flag, on in (("--variant", args.variant), ("--beams", (args.beams or 1) > 1)) if on]
    if given:
        raise AttnvizError(f"--maps already holds the attention; drop {', '.join(given)}")


def _inputs_of(src: dict, args) -> dict:
    """Every file this command reads, for the rule that an output never replaces one of them."""
    names = {
        "model": "the model",
        "maps": "the maps file",
        "image": "the image",
        "audio": "the audio file",
        "feeds": "the feeds file",
        "tokenizer": "the tokenizer",
    }
    out = {names[k]: src.get(k) for k in names}
    out["the recipe"] = args.recipe
    # a document read by --text-file (doc.png and --out doc.png replaced it with the figure)
    out["the --text-file"] = getattr(args, "text_file", None)
    return out


def _pick_row(result, row: int | None):
    """One batch row of the result; without --batch-index a batch draws row 0 and says so."""
    from attnviz.core.rows import beam_rows, pick_row
    from attnviz.core.text_scores import TextScores

    n = result.batch_size
    scores = TextScores.from_info(result.info) if n > 1 else None
    if scores is not None and len(scores.scores) == n:  # a dual encoder's scores, as extract prints them (the row
        print(f"scores: {scores.words}")  # drawn marked)
        for line in scores.lines(row if row is not None else 0):
            print(f"  {line}")
    if row is None:
        if n > 1 and beam_rows(result) is not None:
            say(f"the result holds {n} beams, best first; drawing beam 0 (pick another with --batch-index)")
        elif scores is not None and len(scores.scores) == n:
            say(f"drawing {scores.row_label(0)}, score {scores.scores[0]:.3f} (pick another row with --batch-index)")
        elif n > 1:
            say(f"the input holds {n} rows; drawing row 0 (pick another with --batch-index)")
        return pick_row(result, 0) if n > 1 else result
    try:
        return pick_row(result, row)
    except IndexError:
        held = "the result holds beams" if beam_rows(result) is not None else "the input holds rows"
        raise AttnvizError(f"--batch-index {row}: {held} 0..{max(n, 1) - 1}; pick one of them") from None


def _unread_flags(args, view: str) -> str | None:
    """The note naming the view flags typed that ``view`` does not read (core.view_flags), or None."""
    from attnviz.core.view_flags import VIEW_FLAGS, unread_note

    return unread_note(view, [f.dest for f in VIEW_FLAGS if getattr(args, f.dest, None) is not None])


def _model_reads(args, result, view: str) -> None:
    """The view flags typed that mean nothing for the model (``--picture`` of a text model: no view would read it)
    refused in one line (core.view_flags); after the view's own refusal (``--view image`` of a text model), which
    names the fix that matters first."""
    from attnviz.core.view_flags import VIEW_FLAGS, check_model_reads
    from attnviz.figures.render import why_not

    if why_not(result, view) is None:
        check_model_reads(result, [f.dest for f in VIEW_FLAGS if getattr(args, f.dest, None) is not None])


# the views that draw several --head heads: overlaid (links) or side by side (image); the overview draws every head
SEVERAL_HEADS = ("links", "image", "overview")


def _one_head_note(spec) -> str | None:
    """``--head 1,2`` on a view that draws one head: which it drew (heatmap, alignment, strip and audio drew the
    first without a word, so the second looked drawn too)."""
    heads = spec.heads or []
    if len(heads) < 2 or spec.view in SEVERAL_HEADS:
        return None
    return (
        f"--head {','.join(str(h) for h in heads)}: the {spec.view} view draws one head, head {heads[0]} "
        "(several heads are overlaid in the links view, side by side in the image view)"
    )


def _positional_file(args) -> None:
    """``attnviz figure MAPS.npz`` / ``attnviz figure R.json``: what the file is says what it is for (a model is never
    a .npz or a .json, and ``attnviz open MAPS.npz`` opens maps the same way) — else the maps of ``extract`` were
    refused as "not an ONNX model"."""
    given = args.model
    if not given or args.maps or args.recipe:
        return
    suffix = Path(given).suffix.lower()
    if suffix == ".npz":
        args.model, args.maps = None, given
    elif suffix == ".json":
        args.model, args.recipe = None, given


def run(args) -> int:
    try:
        return _draw(args)
    except AttnvizError as e:
        if args.maps and getattr(e, "param", None) == "generate":
            # figure --maps takes no --generate (it runs nothing): "(see --generate)" sent the user to a flag it
            # refuses; the maps have to be extracted again, generating (extract generates as the window does,
            # unless --generate 0 or a target given with --text-pair)
            raise AttnvizError(
                f"{e}; {Path(args.maps).name} holds no generated words: run 'attnviz extract' again without "
                "--generate 0 (it generates by default, as the window)"
            ) from None
        raise


def _draw(args) -> int:
    from attnviz.core.writes import guard
    from attnviz.figures.recipe import load_recipe, make_recipe, recipe_path_for, unread_keys_note
    from attnviz.figures.render import figure_format, glyph_note, render_spec, save_figure, save_figure_and_recipe
    from attnviz.figures.select import block_label, resolve_block
    from attnviz.figures.sources import load_result
    from attnviz.figures.spec import FigureSpec
    from attnviz.figures.views import figure_notes
    from attnviz.runtime.run_notes import say_run_notes

    _positional_file(args)
    src = _sources_from_args(args)
    spec_d: dict = {}
    recipe_out_default = None
    said_later: list[str | None] = []  # notes said once the figure is drawn (a refusal is its one line alone)
    if args.recipe:
        given = [flag for flag, value in _recipe_clashes(args) if value]
        if given:  # named as typed: '--text' for a --text-file (read into args.text) sent the user looking for one
            raise AttnvizError(f"--recipe already names the model and inputs; drop {', '.join(given)}")
        r = load_recipe(args.recipe)
        said_later.append(unread_keys_note(r, Path(args.recipe).name))
        src = _sources_from_recipe(r, args)
        spec_d = dict(r["view"])
        if r.get("output"):
            recipe_out_default = r["output"]["path"]
            if recipe_out_default is None and not args.out:
                raise AttnvizError(
                    f"the recipe's output {r['output']['outside'][:200]} is outside the recipe's folder; "
                    "give --out to say where the figure goes"
                )
    elif not (args.model or args.maps):
        raise AttnvizError("give a model file, --maps MAPS.npz or --recipe R.json")
    elif args.maps and not args.model:
        _maps_take_no_inputs(args)
    spec_d.update(_spec_overrides(args))
    view_given = "view" in spec_d  # else the view the window opens the result on, once it is there
    _view_defaults(spec_d, args)
    spec = FigureSpec(**spec_d)
    if args.all_heads and spec.view == "overview":
        raise AttnvizError("--all-heads does not apply to the overview view (it already shows every head)")
    out = args.out or recipe_out_default
    if not out:
        raise AttnvizError("give --out FOLDER for --all-heads" if args.all_heads else "give --out FILE.pdf|.svg|.png")
    if args.all_heads:  # a bad --out or --format refused before the (possibly slow) model run, as below
        _all_heads_targets(out, args.format, spec.view, "")
    else:
        figure_format(out)  # fail on a bad suffix before the (possibly slow) model run
        from attnviz.core.untrusted import regular_file

        for kind, words in _SOURCE_WORDS.items():
            for given in src[kind] if isinstance(src[kind], list) else [src[kind]]:  # several images: each
                if given is not None:  # a FIFO, a folder or a dangling link is named as such, not "no such file"
                    regular_file(given, words)
    if src["model"] and not src["maps"] and not any(src[k] for k in ("text", "image", "audio", "feeds")):
        from attnviz.runtime.sample import sample_for_path

        found = sample_for_path(src["model"])  # the model's own sample input, as the app opens it
        sample = found.values
        if sample:
            src.update({k: v for k, v in sample.items() if k != "generate"})
            if src["generate"] is None and sample.get("generate") is not None:
                src["generate"] = int(sample["generate"])
            say(f"no input given; using the model's sample input ({found.describe()})")
    inputs = _inputs_of(src, args)
    # the --all-heads figures and every recipe beside a figure are checked again as they are written
    guard(inputs, {} if args.all_heads else {"--out": out, "--recipe-out": args.recipe_out})
    if args.recipe_out and args.all_heads:  # before the (possibly slow) model run, as the checks above
        raise AttnvizError("--recipe-out names one file; with --all-heads every figure gets FILE.recipe.json beside it")
    if args.recipe_out and Path(args.recipe_out).suffix.lower() != ".json":  # a slip onto a .jsonl, .txt, .png...
        raise AttnvizError(f"--recipe-out {args.recipe_out}: end the file name in .json (a recipe is a JSON file)")
    row = src.get("batch_index")
    result = _pick_row(load_result(**{k: v for k, v in src.items() if k != "batch_index"}), row)
    if src["model"] and not src["maps"]:  # the recipe records the steps taken (the default, when none were asked)
        src["generate"] = int((result.info or {}).get("generate") or 0)
    if not view_given:  # the view the window opens this kind of model on (core.view.opening): one table for both
        from attnviz.core.view import opening_view

        spec_d["view"] = opening_view(result).figure
        _view_defaults(spec_d, args)
        spec = FigureSpec(**spec_d)
    note = None  # said once the figure is drawn: a refusal (--view image of a text model) is its one line alone
    if not args.recipe and args.image_base is None:
        # the view model's base, as the window opens on (colour under a captioner's words): FigureSpec's "grey" is
        # what a recipe written before there was a choice was drawn on; the recipe records the base drawn
        from attnviz.core.view import default_image_base

        spec = FigureSpec(**dict(spec.to_dict(), image_base=default_image_base(result)))
    if not args.recipe and result.audio is not None and spec.padding is None:
        # a speech clip's maps end with the clip, as the window draws them; the recipe records it (one without it
        # was drawn on the whole window)
        spec = FigureSpec(**dict(spec.to_dict(), padding=False))
    if not args.recipe:  # a recipe already says which head it drew (and is drawn as it says)
        from attnviz.figures.select import declared_defaults

        spec, note = declared_defaults(result, spec)
        if args.all_heads and args.layer is None and spec.layer is not None:
            # the declared alignment head picks the block; every layer's heads are drawn (it drew one layer's)
            spec, note = FigureSpec(**dict(spec.to_dict(), layer=None, head=None)), None

    def recipe_for(spec_, path):
        r = make_recipe(spec_, output=path, **src)
        # for the record: where the maps were computed (a CUDA run may differ from a CPU run in the last bits)
        r["run"] = {"provider_used": (result.info or {}).get("provider")}
        if (result.info or {}).get("image_preprocessing"):  # which normalisation the image got (preset, stats, size)
            r["run"]["image_preprocessing"] = result.info["image_preprocessing"]
        if fidelity:  # the figure shows the export's maps, not the model's eager attention: the record says so
            r["run"]["fidelity"] = fidelity
        return r

    fidelity = list((result.info or {}).get("fidelity") or ())
    for warning in fidelity:  # as extract says it (the export lacks part of the model's eager attention)
        say(warning, "warning")

    _model_reads(args, result, spec.view)
    said_later.append(_unread_flags(args, spec.view))
    said_later.append(_one_head_note(spec))
    if not args.all_heads:
        fig = render_spec(result, spec)
        said_later.append(glyph_note(fig))
        said_later += figure_notes(fig)  # a map almost wholly dark on its scale, a long links page's fewer links
        for line in (note, *said_later):
            if line:
                say(line)
        path = Path(out)
        rpath = None if args.no_recipe else Path(args.recipe_out) if args.recipe_out else recipe_path_for(path)
        if rpath is None or (args.recipe and Path(args.recipe).resolve() == rpath.resolve()):
            save_figure(fig, path)  # (the recipe it was drawn from stays as it is)
        else:  # the two together: a Ctrl-C between them never leaves the new figure beside the old recipe
            save_figure_and_recipe(fig, path, recipe_for(spec, path), rpath)
        print(f"wrote {path}")
        say_run_notes(result.info)  # as extract says them: what --max-tokens / --max-seconds cut, the transcript...
        return 0

    bi, block = resolve_block(result, spec.block)
    for line in (note, *said_later):
        if line:
            say(line)
    folder, prefix, fmt = _all_heads_targets(out, args.format, spec.view, block_label(block))
    from attnviz.core.writes import make_folder

    make_folder(folder)
    jobs = [(l, h) for l in range(block.n_layers) for h in range(block.heads_in(l))]
    if spec.layer is not None:
        from attnviz.figures.select import check_layer

        jobs = [(l, h) for l, h in jobs if l == check_layer(block, spec.layer)]
    glyphs = None
    for k, (l, h) in enumerate(jobs):
        _progress(k, len(jobs), f"L{l} H{h}")
        one = FigureSpec(**dict(spec.to_dict(), block=bi, layer=l, head=h, heads=None, agg=None))
        target = folder / f"{prefix}L{l:02d}_H{h:02d}.{fmt}"
        drawn = render_spec(result, one)
        glyphs = glyph_note(drawn) if k == 0 else glyphs  # (every head's figure has the same tokens)
        if args.no_recipe:
            save_figure(drawn, target)
        else:
            save_figure_and_recipe(drawn, target, recipe_for(one, target), recipe_path_for(target))
    _progress(len(jobs), len(jobs), "done")
    if glyphs:
        say(glyphs)
    print(f"wrote {len(jobs)} figures to {folder}")
    say_run_notes(result.info)
    return 0
