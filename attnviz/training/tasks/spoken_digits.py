"""``spoken-digits``: transcribe synthesized digit words (2-6 a clip) and time them; a tiny Whisper folder.

Unlike the other tasks this one trains transformers' ``WhisperForConditionalGeneration`` (the layout the runtime
opens as a speech model) and exports it with ``export-hf``'s speech path, so it owns its whole run
(:meth:`SpokenDigits.run`) instead of going through :class:`attnviz.training.loop.Trainer`, and its held-out
evaluation runs the exported folder through the engine (:func:`evaluate_folder`): greedy transcripts, and the word
times ``attnviz align-audio`` gives (the folder's ``alignment_heads``) against the synthesizer's segment times.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.training.tasks import Task

TASK = "spoken-digits"
FOLDER = "model"  # the run folder's exported speech folder (run/model/encoder_model.onnx ...)
SOURCE = "hf"  # the run folder's transformers checkpoint that export-hf reads


class SpokenDigits(Task):
    name = TASK
    summary = "synthesized spoken digits (2-6 a clip, 16 kHz) -> their words and times (tiny Whisper folder)"
    target = "exact match >= 0.95 and every word's time overlapping its true segment on held-out clips"
    trains_itself = True  # the train and eval commands hand the whole run to run() / evaluate_folder()

    def configs(self, preset):
        raise AttnvizError(f"{TASK} trains a Whisper folder of its own (attnviz train {TASK} --out DIR)")

    def run(self, out: Path, preset: str, seed: int | None, steps: int | None, say) -> dict:
        return train_and_export(out, preset, seed, steps, say)


def _sample_clip():
    """The demo's sample: the first clip of the sample seed with at least four digits (never in train or test)."""
    from attnviz.training import data_speech as ds
    from attnviz.training.speech_digits import split_seed

    rng = np.random.default_rng(split_seed("sample"))
    while True:
        clip = ds.make_clip(rng)
        if len(clip.segments) >= 4:
            return clip


def write_wav(path: Path, wave: np.ndarray) -> None:
    import io

    import soundfile as sf

    from attnviz.core.writes import atomic_write_bytes
    from attnviz.training.data_speech import RATE

    buf = io.BytesIO()  # encoded in memory, written in one step through the guard (core.writes)
    sf.write(buf, wave, RATE, subtype="PCM_16", format="WAV")
    atomic_write_bytes(path, buf.getvalue(), "--out")


def train_and_export(out: Path, preset: str, seed: int | None, steps: int | None, say) -> dict:
    from attnviz.core.writes import guard
    from attnviz.training import speech_digits as sd

    cfg = sd.SpeechConfig.preset(preset)
    if seed is not None:
        cfg.seed = seed
    if steps is not None:
        cfg.steps = steps
        cfg.warmup = min(cfg.warmup, max(1, steps // 10))
    folder = out / FOLDER
    guard({}, {"--out": [folder, out / SOURCE, out / "metrics.json"]})
    if folder.exists() and any(folder.iterdir()):
        raise AttnvizError(f"{folder} exists; give a new --out (or remove it) to train {TASK} again")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model, report, _ = sd.train(cfg, say)
    if (out / SOURCE).exists():
        shutil.rmtree(out / SOURCE)
    sd.save_source(model, report, out / SOURCE)
    params = int(sum(p.numel() for p in model.parameters()))
    return finish(out, cfg, report, params, time.perf_counter() - t0, preset, say)


def finish(out: Path, cfg, report, params: int, seconds: float, preset: str, say) -> dict:
    """Export the run's transformers checkpoint (``out/hf``) to ``out/model``, add the sample clip, measure the
    folder through the engine, and record it all in the files' metadata and ``out/metrics.json``."""
    from attnviz.core.writes import atomic_write_json
    from attnviz.training import data_speech as ds
    from attnviz.training import speech_digits as sd
    from attnviz.training.hf_export import export_hf

    t0 = time.perf_counter()
    folder = out / FOLDER
    exported = export_hf(out / SOURCE, folder)
    sample = _sample_clip()
    write_wav(folder / sd.SAMPLE_WAV, sample.wave)
    say(f"exported {folder} (max |diff| against transformers {exported.max_diff:.2g}); measuring it on held-out clips")
    metrics = evaluate_folder(folder, cfg.n_test)
    meta = {
        # generate: a digit string and its end fit the 16 decoder positions (the window defaults to 32 steps)
        "sample": {"audio": sd.SAMPLE_WAV, "generate": ds.MAX_DIGITS + 2, "transcript": sample.transcript},
        "metrics": metrics,
        "alignment": {"heads": report.alignment_heads, "convention": "predict"},
        "training": sd.config_dict(cfg) | {"train_seconds": report.train_seconds},
    }
    add_metadata(folder, meta)
    summary = {
        "task": TASK,
        "preset": preset,
        "seed": cfg.seed,
        "steps": cfg.steps,
        "train_seconds": report.train_seconds,
        "total_seconds": round(seconds + time.perf_counter() - t0, 1),
        "parameters": params,
        "torch_metrics": report.torch_metrics,
        "head_mass": report.head_mass,
        "alignment_heads": report.alignment_heads,
        "export_max_diff": exported.max_diff,
        "metrics": metrics,
        "model": str(folder),
    }
    atomic_write_json(out / "metrics.json", summary, "--out")
    return summary


def add_metadata(folder: Path, meta: dict) -> None:
    """The run's sample, metrics and settings into both files' ``attnviz.*`` metadata (beside export-hf's)."""
    import onnx

    from attnviz.core import metadata as md
    from attnviz.core.writes import atomic_path

    for name in ("encoder_model.onnx", "decoder_model.onnx"):
        m = onnx.load(str(folder / name))
        keep = [p for p in m.metadata_props if p.key[len(md.PREFIX) :] not in meta]
        del m.metadata_props[:]
        m.metadata_props.extend(keep)
        for k, v in md.dump(meta).items():
            p = m.metadata_props.add()
            p.key, p.value = k, v
        with atomic_path(folder / name, "--out") as tmp:
            onnx.save(m, str(tmp))


def is_task_folder(path: Path) -> bool:
    """A folder this task exported (its encoder's metadata names the task's training)."""
    import onnx

    enc = path / "encoder_model.onnx"
    if not enc.is_file():
        return False
    props = {p.key: p.value for p in onnx.load(str(enc), load_external_data=False).metadata_props}
    return f'"task": "{TASK}"' in props.get("attnviz.training", "")


def evaluate_folder(folder: Path, n: int | None = None) -> dict:
    """Held-out metrics of an exported folder through the engine: greedy transcripts (exact match, digit accuracy)
    and the folder's alignment-head word times, teacher-forced on the true transcript, against the segments."""
    from attnviz.runtime import audio_words as aw
    from attnviz.runtime import open_model
    from attnviz.training import data_speech as ds
    from attnviz.training.speech_digits import SpeechConfig, split_seed

    n = n or SpeechConfig().n_test
    clips = ds.make_clips(n, split_seed("test"))
    model = open_model(folder, provider="cpu")
    heads = aw.AlignConfig.for_model(model).heads
    if heads is None:
        raise AttnvizError(f"{folder}: generation_config.json names no alignment_heads")
    exact, right, total = 0, 0, 0
    overlap, centre, zero, words = 0, 0, 0, 0
    errors: list[float] = []
    for clip in clips:
        got = model.analyze(audio=clip.wave, generate=ds.MAX_DIGITS + 2).info["generated_ids"]
        text = model.tokenizers[1].decode([t for t in got if t < 10]).split()
        want = clip.transcript.split()
        exact += text == want
        right += sum(a == b for a, b in zip(text, want))
        total += max(len(text), len(want))
        timed = aw.run_clip(model, clip.wave, clip.transcript, None).words(heads)
        for w, s in zip(timed, clip.segments):
            words += 1
            zero += w.end <= w.start
            overlap += w.start < s.end and w.end > s.start
            centre += s.start <= (w.start + w.end) / 2 <= s.end
            errors += [abs(w.start - s.start), abs(w.end - s.end)]
        words += max(0, len(clip.segments) - len(timed))  # a word the alignment lost counts as a miss
    return {
        "exact_match": round(exact / n, 4),
        "digit_accuracy": round(right / max(1, total), 4),
        "word_overlap": round(overlap / max(1, words), 4),
        "word_centre_inside": round(centre / max(1, words), 4),
        "zero_length_words": zero,
        "boundary_mae_s": round(float(np.mean(errors)) if errors else float("nan"), 4),
        "alignment_heads": [list(h) for h in heads],
        "n": n,
        "words": words,
    }
