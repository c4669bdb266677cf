"""attnviz inspect MODEL: inputs, outputs, metadata and the attention sites found."""

from __future__ import annotations

import json
import re

from attnviz.core.notice import say

# the process may end without the interpreter's teardown once the command returns (cli._leave_at_once): it writes
# only to stdout (flushed there) and its probe's child is stopped by the exit handlers; the teardown was ~0.05 s
# CPU of ~0.29 s (numpy's and onnx's modules and objects collected one by one), bench/RESULTS.md first22b
LEAVES_AT_ONCE = True

HELP = "show a model's inputs, outputs, metadata and the attention sites found"

METADATA_CHARS = 100  # a metadata value is shown on one line, cut here (some exporters store whole configs)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(value, limit: int | None = None) -> str:
    """One printable line: control characters (newlines, terminal escapes) shown as escapes, long text cut."""
    s = _CONTROL.sub(lambda m: {"\n": "\\n", "\t": "\\t"}.get(m.group(), f"\\x{ord(m.group()):02x}"), str(value))
    if limit is not None and len(s) > limit:
        s = s[:limit] + f"… ({len(str(value))} chars; --json shows it whole)"
    return s


def add_arguments(p):
    from attnviz.runtime.commands.common import add_variant_argument

    p.add_argument(
        "model", metavar="MODEL", help="ONNX model file, or an export folder (optimum encoder + decoder files)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables (metadata values whole, not cut)")
    add_variant_argument(p)
    p.add_argument(
        "--no-probe", action="store_true", help="skip the short dummy run that confirms labels and head counts"
    )


def _load_error(m) -> str | None:
    """Why onnxruntime cannot load the model (or crashed loading it), else None; the session is made now."""
    from attnviz import AttnvizError

    try:
        _ = m.provider  # creates the inference session the probe runs in
    except AttnvizError as e:
        return str(e)
    return None


def run(args) -> int:
    if not args.no_probe:
        from attnviz.runtime.child_start import start_early

        # the probe's isolation child loads onnxruntime while this process imports onnx and reads the model
        # (runtime/child_start.py; as extract's); a model with no attention site never takes it: stopped at exit
        start_early()
    from attnviz.core.attention import shown_stack
    from attnviz.runtime import open_model
    from attnviz.runtime.model_summary import kind_words

    m = open_model(args.model, provider="cpu", variant=args.variant)
    load_error = None if args.no_probe or not m.sites else _load_error(m)
    probed = False if args.no_probe or not m.sites or load_error else m.probe()
    d = m.describe()
    d["probed"] = probed
    if load_error:
        d["load_error"] = load_error
    if args.json:
        # the values whole: the table's hint sends a reader here for them (a training config, a vocabulary), and
        # describe() cut them at 200 characters, so no command showed a demo's attnviz.config (904)
        d["metadata"] = dict(m.metadata)
        print(json.dumps(d, indent=2))
        return 0 if m.sites else 1
    if load_error:  # the graph is still described; running it (extract, figure, open) will refuse the same way
        say(f"{clean(load_error, 300)}; extract, figure and open will refuse it", "warning")
    kind = kind_words(d["kind"], m.sites)  # a dual encoder is said as one ("vision" is the engine's word)
    print(
        f"model    {clean(d['model'])}  ({kind}; {clean(d['producer'] or 'unknown producer', 80)}; opsets {clean(d['opsets'])})"
    )
    if d.get("variants"):  # a Hub repository: which set of its quantized siblings this is
        print(f"variant  {clean(d['variant'])} (of {clean(', '.join(d['variants']))}; choose with --variant NAME)")
    print("inputs")
    for i in d["inputs"]:
        print(f"  {clean(i['name']):<28} {i['dtype']:<8} [{clean(', '.join(map(str, i['shape'])))}]  role={i['role']}")
    a = d.get("audio")
    if a and "extractor" in a:  # an encoder on raw samples (wav2vec2): its rate and its conv stack's frames
        print(
            f"audio    {a['sampling_rate']} Hz samples ({a['extractor']}"
            f"{', normalised per clip' if a['do_normalize'] else ''}), frames of {a['frame_seconds'] * 1000:g} ms "
            f"({a['receptive_seconds'] * 1000:.3g} ms heard each); clips up to {a['seconds']:g} s (--max-seconds "
            "for longer)"
        )
    elif a:  # a speech model: what it hears and how its decoder starts
        print(
            f"audio    {a['sampling_rate']} Hz, a {a['seconds']:g} s window: {a['mel_bins']} mel bins x {a['frames']} "
            f"frames, encoder frames of {a['frame_seconds']:g} s; decoder prompt {clean(' '.join(a['decoder_prompt']))}"
        )
    print("outputs")
    for o in d["outputs"]:
        print(f"  {clean(o['name']):<28} {o['dtype']:<8} [{clean(', '.join(map(str, o['shape'])))}]")
    if d["metadata"]:
        print("metadata")
        for k, v in m.metadata.items():  # the full values: their real length is reported
            print(f"  {clean(k, 60):<28} {clean(v, METADATA_CHARS)}")
    for note in d.get("fidelity") or ():
        say(clean(note), "warning")
    if not d["sites"]:
        print(f"attention: none — {d['no_attention_reason']}")
        return 1
    print(f"attention sites ({len(d['sites'])})")
    print(f"  {'#':>3}  {'stack':<8} {'kind':<7} {'layer':>5} {'heads':>5}  {'method':<17} node")
    tower = m.vision_tower  # a VLM's encoder reads "vision" as in every view (--json: the sites' own spelling)
    for i, s in enumerate(d["sites"]):
        stack = shown_stack(s["stack"], tower)
        print(
            f"  {i:>3}  {stack:<8} {s['kind']:<7} {s['layer']:>5} {s['heads'] or '?':>5}  {s['method']:<17} {clean(s['node'], 120)}"
            + (f"  ({clean(s['tower'])} tower)" if s.get("tower") else "")
            + (f"  (within {clean(s['window'])})" if s.get("window") else "")
        )
    _method_legend(d["sites"])
    if tower and any(s["stack"] == "encoder" for s in d["sites"]):
        print(
            "  vision: the vision tower's sites (ablate --heads and compare --figure-head take 'vision' or 'encoder')"
        )
    return 0


def _method_legend(sites: list[dict]) -> None:
    """One line per fused-op method in the table: where its maps come from (the op's own output, or recomputed),
    so a GroupQueryAttention decoder's maps are not mistaken for a Softmax's; plain Softmax sites need none."""
    from attnviz.runtime.graph import METHOD_NOTES

    for method in dict.fromkeys(s["method"] for s in sites):
        if not method.startswith("softmax") and method in METHOD_NOTES:
            print(f"  {method}: {METHOD_NOTES[method]}")
