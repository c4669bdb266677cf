"""attnviz inspect MODEL: inputs, outputs, metadata and the attention sites found."""

from __future__ import annotations

import json

HELP = "show a model's inputs, outputs, metadata and the attention sites found"


def add_arguments(p):
    p.add_argument("model", metavar="MODEL", help="ONNX model file, or an export folder (optimum encoder + decoder files)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--no-probe", action="store_true", help="skip the short dummy run that confirms labels and head counts")


def run(args) -> int:
    from attnviz.runtime import open_model

    m = open_model(args.model, provider="cpu")
    probed = False if args.no_probe or not m.sites else m.probe()
    d = m.describe()
    d["probed"] = probed
    if args.json:
        print(json.dumps(d, indent=2))
        return 0 if m.sites else 1
    print(f"model    {d['model']}  ({d['kind']}; {d['producer'] or 'unknown producer'}; opsets {d['opsets']})")
    print("inputs")
    for i in d["inputs"]:
        print(f"  {i['name']:<28} {i['dtype']:<8} [{', '.join(map(str, i['shape']))}]  role={i['role']}")
    print("outputs")
    for o in d["outputs"]:
        print(f"  {o['name']:<28} {o['dtype']:<8} [{', '.join(map(str, o['shape']))}]")
    if d["metadata"]:
        print("metadata")
        for k, v in d["metadata"].items():
            print(f"  {k:<28} {v[:100]}")
    if not d["sites"]:
        print(f"attention: none — {d['no_attention_reason']}")
        return 1
    print(f"attention sites ({len(d['sites'])})")
    print(f"  {'#':>3}  {'stack':<8} {'kind':<6} {'layer':>5} {'heads':>5}  {'method':<17} node")
    for i, s in enumerate(d["sites"]):
        print(f"  {i:>3}  {s['stack']:<8} {s['kind']:<6} {s['layer']:>5} {s['heads'] or '?':>5}  {s['method']:<17} {s['node']}")
    return 0
