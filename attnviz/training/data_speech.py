"""Synthesized "spoken digits": speech-like clips with a known transcript and known segment times.

Each digit word is a distinct short sound: two gliding tones (a low and a high "formant", each with its second
harmonic), under a smooth attack/decay envelope, its pitch shifted by a few per cent per utterance.  A clip holds 2-6
digits with random durations and random gaps (some leading silence), low white noise over the whole clip, 16 kHz,
at most :data:`MAX_SECONDS`.  The segment times are exact by construction (the samples where a digit's envelope is
non-zero), so cross-attention word timings can be checked against them.  Numpy only, seeded, deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RATE = 16000
MAX_SECONDS = 3.8  # the model's window is 4 s (preprocessor_config.json chunk_length 4): room for the longest clip
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# (low tone start, end Hz), (high tone start, end Hz): every digit differs in where its energy sits or moves
TONES: tuple[tuple[tuple[float, float], tuple[float, float]], ...] = (
    ((300, 300), (2200, 2200)),
    ((400, 650), (1200, 1200)),
    ((650, 400), (2800, 2500)),
    ((800, 800), (1600, 2100)),
    ((500, 500), (3400, 3000)),
    ((350, 750), (2000, 2000)),
    ((950, 700), (1400, 1400)),
    ((450, 450), (1000, 1900)),
    ((700, 700), (3000, 3000)),
    ((250, 500), (2600, 1900)),
)
MIN_DIGITS, MAX_DIGITS = 2, 6
DURATION = (0.20, 0.38)  # seconds per digit
GAP = (0.04, 0.22)  # seconds between digits
LEAD = (0.05, 0.30)  # silence before the first digit
RAMP = 0.02  # attack and decay, seconds
NOISE = (0.003, 0.012)  # white-noise standard deviation over the clip (peak tone amplitude ~0.5)


@dataclass(frozen=True)
class Segment:
    digit: int
    start: float  # seconds
    end: float

    @property
    def word(self) -> str:
        return WORDS[self.digit]


@dataclass(frozen=True)
class Clip:
    wave: np.ndarray  # float32 [samples], 16 kHz
    segments: tuple[Segment, ...]

    @property
    def digits(self) -> list[int]:
        return [s.digit for s in self.segments]

    @property
    def transcript(self) -> str:
        return " ".join(s.word for s in self.segments)


def digit_sound(digit: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of one digit: its two gliding tones and their second harmonics under the envelope."""
    t = np.arange(n) / RATE
    frac = t / max(t[-1], 1e-9)
    scale = rng.uniform(0.95, 1.05)  # a speaker's pitch, per utterance
    out = np.zeros(n)
    for (f0, f1), amp in zip(TONES[digit], (1.0, 0.6)):
        freq = scale * (f0 + (f1 - f0) * frac)
        phase = 2 * np.pi * np.cumsum(freq) / RATE
        out += amp * (np.sin(phase) + 0.3 * np.sin(2 * phase))
    ramp = min(int(RAMP * RATE), n // 2)
    env = np.ones(n)
    env[:ramp] = np.sin(np.linspace(0, np.pi / 2, ramp)) ** 2
    env[n - ramp :] = env[:ramp][::-1]
    return out * env / np.abs(out).max() * rng.uniform(0.35, 0.6)


def make_clip(rng: np.random.Generator) -> Clip:
    k = int(rng.integers(MIN_DIGITS, MAX_DIGITS + 1))
    digits = rng.integers(0, 10, size=k)
    durs = rng.uniform(*DURATION, size=k)
    gaps = rng.uniform(*GAP, size=k - 1)
    lead = rng.uniform(*LEAD)
    total = lead + durs.sum() + gaps.sum()
    if total > MAX_SECONDS - 0.05:  # squeeze the silences, never the digits
        room = MAX_SECONDS - 0.05 - durs.sum()
        squeeze = room / (lead + gaps.sum())
        lead, gaps = lead * squeeze, gaps * squeeze
    tail = rng.uniform(0.05, 0.25)
    n = int(round((lead + durs.sum() + gaps.sum() + tail) * RATE))
    n = min(n, int(MAX_SECONDS * RATE))
    wave = rng.normal(0.0, rng.uniform(*NOISE), n)
    segs = []
    at = int(round(lead * RATE))
    for i, (d, dur) in enumerate(zip(digits, durs)):
        m = int(round(dur * RATE))
        wave[at : at + m] += digit_sound(int(d), m, rng)
        segs.append(Segment(int(d), at / RATE, (at + m) / RATE))
        at += m + (int(round(gaps[i] * RATE)) if i < k - 1 else 0)
    return Clip(wave.astype(np.float32), tuple(segs))


def make_clips(n: int, seed: int) -> list[Clip]:
    rng = np.random.default_rng(seed)
    return [make_clip(rng) for _ in range(n)]
