"""The ``spoken-digits`` model: a tiny Whisper (transformers' ``WhisperForConditionalGeneration``) trained from
scratch on :mod:`attnviz.training.data_speech`, then exported by ``export-hf``'s speech path as the folder the
runtime opens (encoder_model.onnx + decoder_model.onnx + preprocessor_config.json + generation_config.json +
tokenizer.json).

Why transformers' Whisper and not attnviz's own model: the runtime opens speech models as Whisper folders (log-mel
features from ``preprocessor_config.json``, the forced prompt and ``alignment_heads`` from
``generation_config.json``), so the demo is exactly what a researcher's own Whisper export looks like.

Guided attention (as the translation and captioning demos): decoder cross-attention head :data:`GUIDED` is trained,
beside the transcript loss, to put the row that predicts a digit on the encoder frames of that digit's segment
(the synthesizer's times), on training clips only.  The exported folder declares the cross head that aligns best on
the held-out clips as its ``alignment_heads``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from attnviz.training import data_speech as ds

CHUNK_SECONDS = 4  # the feature extractor's window (chunk_length): 400 log-mel frames, 200 encoder positions
FRAME_SECONDS = 0.02  # one encoder position (two 10 ms hops after the stride-2 conv)
SPECIAL = ("<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>", "<|notimestamps|>")
VOCAB = (*ds.WORDS, *SPECIAL)  # digit words 0-9, then the specials
ID = {w: i for i, w in enumerate(VOCAB)}
EOT = ID["<|endoftext|>"]
PROMPT = (ID["<|startoftranscript|>"], ID["<|en|>"], ID["<|transcribe|>"], ID["<|notimestamps|>"])
GUIDED = (1, 0)  # (decoder layer, head) trained to follow the segments
SAMPLE_WAV = "sample.wav"


@dataclass
class SpeechConfig:
    """Model and training settings of one run (stored in the exported files' ``attnviz.config``)."""

    d_model: int = 64
    layers: int = 2  # encoder and decoder each
    heads: int = 4
    ffn: int = 256
    steps: int = 2000  # the first run's loss was flat from ~1600 of 2500
    batch_size: int = 32
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    align_weight: float = 1.0  # guided cross-attention loss weight (0: none)
    guided: list[int] = field(default_factory=lambda: list(GUIDED))
    n_train: int = 6000
    n_test: int = 500
    seed: int = 0
    log_every: int = 50

    @classmethod
    def preset(cls, name: str) -> SpeechConfig:
        if name == "tiny":  # tests: seconds
            return cls(d_model=32, ffn=64, steps=30, batch_size=8, n_train=64, n_test=16, log_every=10)
        return cls()


def split_seed(split: str) -> int:
    from attnviz.training.seeds import split_seed as seeds

    return seeds("spoken-digits", split)


def feature_extractor():
    import transformers

    return transformers.WhisperFeatureExtractor(feature_size=80, chunk_length=CHUNK_SECONDS)


def features(fe, clips: list[ds.Clip]) -> np.ndarray:
    """Log-mel ``[n, 80, 400]`` float32, as the runtime computes them from the folder's preprocessor_config.json."""
    out = []
    for i in range(0, len(clips), 64):
        f = fe([c.wave for c in clips[i : i + 64]], sampling_rate=ds.RATE, return_tensors="np")
        out.append(f.input_features.astype(np.float32))
    return np.concatenate(out)


def decoder_rows(clips: list[ds.Clip]) -> tuple[np.ndarray, np.ndarray]:
    """``decoder_input_ids`` (prompt + digits, padded with end-of-text) and ``labels`` (digits + end-of-text, -100
    under the prompt and the padding); the row that predicts digit k is ``len(PROMPT) - 1 + k``."""
    n = len(PROMPT) + max(len(c.segments) for c in clips)
    ids = np.full((len(clips), n), EOT, np.int64)
    labels = np.full((len(clips), n), -100, np.int64)
    p = len(PROMPT)
    for i, c in enumerate(clips):
        d = c.digits
        ids[i, :p] = PROMPT
        ids[i, p : p + len(d)] = d
        labels[i, p - 1 : p - 1 + len(d)] = d
        labels[i, p - 1 + len(d)] = EOT
    return ids, labels


def guide_targets(clips: list[ds.Clip], rows: int, frames: int) -> np.ndarray:
    """``[n, rows, frames]``: for each row that predicts a digit, uniform over the encoder positions whose centre
    lies in the digit's segment, and for the row that predicts the end, over the clip after the last digit; zero
    rows elsewhere (not supervised).  Without the end row's target it listened to the last digit, and the warp
    then ended the last word where it began (zero-length last words in the first run)."""
    out = np.zeros((len(clips), rows, frames), np.float32)
    centres = (np.arange(frames) + 0.5) * FRAME_SECONDS
    for i, c in enumerate(clips):
        spans = [(s.start, s.end) for s in c.segments] + [(c.segments[-1].end, len(c.wave) / ds.RATE)]
        for k, (start, end) in enumerate(spans):
            inside = (centres >= start) & (centres <= end)
            if inside.any() and len(PROMPT) - 1 + k < rows:
                out[i, len(PROMPT) - 1 + k, inside] = 1.0 / inside.sum()
    return out


def build_model(cfg: SpeechConfig):
    import transformers as T

    wc = T.WhisperConfig(
        vocab_size=len(VOCAB),
        num_mel_bins=80,
        d_model=cfg.d_model,
        encoder_layers=cfg.layers,
        decoder_layers=cfg.layers,
        encoder_attention_heads=cfg.heads,
        decoder_attention_heads=cfg.heads,
        encoder_ffn_dim=cfg.ffn,
        decoder_ffn_dim=cfg.ffn,
        max_source_positions=CHUNK_SECONDS * 50,
        max_target_positions=len(PROMPT) + ds.MAX_DIGITS + 6,
        pad_token_id=EOT,
        bos_token_id=EOT,
        eos_token_id=EOT,
        decoder_start_token_id=PROMPT[0],
        suppress_tokens=[],
        begin_suppress_tokens=[],
        dropout=0.0,
    )
    model = T.WhisperForConditionalGeneration(wc)
    model.config._attn_implementation = "eager"  # cross-attention probabilities for the guided loss
    model.generation_config = T.GenerationConfig(
        decoder_start_token_id=PROMPT[0],
        eos_token_id=EOT,
        pad_token_id=EOT,
        bos_token_id=EOT,
        forced_decoder_ids=[[i, t] for i, t in enumerate(PROMPT[1:], 1)],
        lang_to_id={"<|en|>": ID["<|en|>"]},
        task_to_id={"translate": ID["<|translate|>"], "transcribe": ID["<|transcribe|>"]},
        no_timestamps_token_id=ID["<|notimestamps|>"],
        is_multilingual=True,
        suppress_tokens=[],
        begin_suppress_tokens=[],
        max_length=wc.max_target_positions,
    )
    return model


def tokenizer():
    import transformers as T
    from tokenizers import Tokenizer, models, pre_tokenizers

    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token=SPECIAL[0]))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    eot = SPECIAL[0]
    return T.PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token=eot,
        eos_token=eot,
        pad_token=eot,
        bos_token=eot,
        additional_special_tokens=list(SPECIAL[1:]),
    )


@dataclass
class Split:
    clips: list[ds.Clip]
    feats: np.ndarray


def make_split(split: str, cfg: SpeechConfig, fe) -> Split:
    n = cfg.n_train if split == "train" else cfg.n_test
    clips = ds.make_clips(n, split_seed(split))
    return Split(clips, features(fe, clips))


def lr_at(step: int, cfg: SpeechConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))


def step_loss(model, feats, clips, cfg: SpeechConfig):
    import torch
    import torch.nn.functional as F

    ids, labels = decoder_rows(clips)
    out = model(
        input_features=torch.from_numpy(feats),
        decoder_input_ids=torch.from_numpy(ids),
        output_attentions=cfg.align_weight > 0,
    )
    lab = torch.from_numpy(labels)
    ce = F.cross_entropy(out.logits.reshape(-1, out.logits.size(-1)), lab.reshape(-1), ignore_index=-100)
    if cfg.align_weight <= 0:
        return ce, ce.detach(), torch.zeros(())
    layer, head = cfg.guided
    attn = out.cross_attentions[layer][:, head]  # [B, rows, frames]
    target = torch.from_numpy(guide_targets(clips, attn.shape[1], attn.shape[2]))
    supervised = target.sum(-1) > 0
    guided = -(target * torch.log(attn + 1e-8)).sum(-1)[supervised].mean()
    return ce + cfg.align_weight * guided, ce.detach(), guided.detach()


def greedy(model, feats: np.ndarray, max_new: int = ds.MAX_DIGITS + 2) -> list[list[int]]:
    """Greedy transcripts (digit ids, stopped at end-of-text), the whole prefix re-run each step."""
    import torch

    with torch.no_grad():
        states = model.get_encoder()(input_features=torch.from_numpy(feats)).last_hidden_state
        ids = torch.tensor([list(PROMPT)] * len(feats))
        for _ in range(max_new):
            logits = model(encoder_outputs=(states,), decoder_input_ids=ids).logits[:, -1]
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
    out = []
    for row in ids[:, len(PROMPT) :].tolist():
        out.append(row[: row.index(EOT)] if EOT in row else row)
    return out


def transcript_metrics(hyps: list[list[int]], clips: list[ds.Clip]) -> dict:
    exact = np.mean([h == c.digits for h, c in zip(hyps, clips)])
    pos = [(a == b) for h, c in zip(hyps, clips) for a, b in zip(h, c.digits)]
    total = sum(max(len(h), len(c.digits)) for h, c in zip(hyps, clips))
    return {"exact_match": float(exact), "digit_accuracy": float(sum(pos) / max(1, total)), "n": len(clips)}


def head_mass(model, feats: np.ndarray, clips: list[ds.Clip]) -> np.ndarray:
    """``[layers, heads]``: mean cross-attention mass a digit's predicting row puts inside that digit's segment
    (and the end's row after the last digit), teacher-forced on the true transcript."""
    import torch

    ids, _ = decoder_rows(clips)
    with torch.no_grad():
        out = model(
            input_features=torch.from_numpy(feats), decoder_input_ids=torch.from_numpy(ids), output_attentions=True
        )
    cross = np.stack([a.numpy() for a in out.cross_attentions], 1)  # [B, L, H, rows, frames]
    target: np.ndarray = guide_targets(clips, cross.shape[3], cross.shape[4]) > 0
    rows = np.any(target, axis=-1)  # [B, rows]
    mass = (cross * target[:, None, None]).sum(-1)  # [B, L, H, rows]
    return (mass * rows[:, None, None]).sum((0, 3)) / rows.sum()


@dataclass
class Report:
    steps: int
    train_seconds: float
    torch_metrics: dict
    head_mass: list[list[float]]
    alignment_heads: list[list[int]]
    losses: list[list[float]] = field(default_factory=list)


def train(cfg: SpeechConfig, say=lambda s: print(s, file=sys.stderr)):
    """Train from scratch; returns (model, report, test split)."""
    import torch

    torch.manual_seed(cfg.seed)
    fe = feature_extractor()
    t0 = time.perf_counter()
    train_split, test = make_split("train", cfg, fe), make_split("test", cfg, fe)
    say(
        f"spoken-digits: {len(train_split.clips)} training / {len(test.clips)} test clips ({time.perf_counter() - t0:.0f}s)"
    )
    model = build_model(cfg)
    say(f"tiny Whisper: {sum(p.numel() for p in model.parameters()):,} parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}], lr=cfg.lr
    )
    rng = np.random.default_rng(cfg.seed)
    losses = []
    t0 = time.perf_counter()
    model.train()
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        idx = rng.integers(0, len(train_split.clips), cfg.batch_size)
        loss, ce, guided = step_loss(model, train_split.feats[idx], [train_split.clips[i] for i in idx], cfg)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            losses.append([step + 1, float(ce), float(guided)])
            el = time.perf_counter() - t0
            say(f"step {step + 1}/{cfg.steps} ce {float(ce):.4f} guided {float(guided):.3f} {el:.0f}s")
    train_s = time.perf_counter() - t0
    model.eval()
    metrics = transcript_metrics(greedy(model, test.feats), test.clips)
    mass = head_mass(model, test.feats, test.clips)
    best = np.unravel_index(int(np.argmax(mass)), mass.shape)
    report = Report(
        cfg.steps, round(train_s, 1), metrics, mass.round(4).tolist(), [[int(best[0]), int(best[1])]], losses
    )
    say(f"trained in {train_s:.0f}s; held-out (PyTorch): {metrics}; best aligning head {report.alignment_heads[0]}")
    return model, report, test


def save_source(model, report: Report, folder: Path) -> None:
    """The transformers folder export-hf reads: weights, configs, tokenizer, feature extractor."""
    model.generation_config.alignment_heads = report.alignment_heads
    model.save_pretrained(folder)
    tokenizer().save_pretrained(folder)
    feature_extractor().save_pretrained(folder)


def config_dict(cfg: SpeechConfig) -> dict:
    return {"task": "spoken-digits", **asdict(cfg)}
