"""A speech model's decoder prompt: the forced tokens Whisper starts every transcript with.

``<|startoftranscript|>``, the language, the task and ``<|notimestamps|>`` come from the folder's
``generation_config.json`` (else ``config.json``) exactly as transformers' ``WhisperGenerationMixin`` builds them
(``_retrieve_init_tokens``): ``language`` / ``task`` when the config sets them, else the legacy
``forced_decoder_ids`` (consecutive positions from 1); a language slot left empty (``[1, null]``, what the
multilingual checkpoints ship) is detected per clip, as transformers does: one decoder step on the start token,
the most likely language token wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError
from attnviz.core.metadata import is_token_id
from attnviz.core.setting_words import fix


@dataclass(frozen=True)
class SpeechPrompt:
    """The forced prompt of a speech decoder; ``ids[language_slot]`` is None while the language is undetected."""

    ids: tuple[int | None, ...]
    languages: tuple[int, ...] = ()  # the language token ids (lang_to_id), for detection
    language_slot: int | None = None  # where the detected language goes (None: nothing to detect)
    max_positions: int | None = None  # the decoder's position table (config.json max_target_positions)

    def to_meta(self) -> dict:
        return {
            "ids": list(self.ids),
            "languages": list(self.languages),
            "language_slot": self.language_slot,
            "max_positions": self.max_positions,
        }

    @classmethod
    def from_meta(cls, d: Mapping) -> SpeechPrompt:
        slot, limit = d.get("language_slot"), d.get("max_positions")
        return cls(
            tuple(d.get("ids", ())),
            tuple(d.get("languages", ())),
            slot if isinstance(slot, int) else None,
            limit if isinstance(limit, int) else None,
        )

    def check_room(self, prompt_len: int, generate: int, name: str) -> None:
        """Refuse in one line a prompt and generation that run past the decoder's positions (onnxruntime would
        stop inside the position table's Gather)."""
        fed = prompt_len + max(generate - 1, 0)  # the last generated token is never fed back
        if self.max_positions is None or fed <= self.max_positions:
            return
        most = self.max_positions - prompt_len + 1
        raise AttnvizError(
            fix(
                "room",
                name=name,
                positions=self.max_positions,
                prompt=prompt_len,
                generate=generate,
                fed=fed,
                most=most,
            )
            + (fix("room_pair") if most < 1 else ""),
            param="generate",
        )

    def most_steps(self) -> int | None:
        """The most generation steps the decoder's positions hold after the forced prompt (None: no limit known),
        as :meth:`check_room` counts them."""
        if self.max_positions is None or not self.ids:
            return None
        return max(self.max_positions - len(self.ids) + 1, 0)

    @property
    def start(self) -> int:
        first = self.ids[0]
        assert first is not None  # from_configs always starts with decoder_start_token_id
        return first

    def rows(self, detect: Callable[[list[int]], np.ndarray], batch: int) -> list[list[int]]:
        """The prompt of every batch row; ``detect([start])`` gives the start step's logits ``[batch, vocab]``
        when a language must be detected."""
        if self.language_slot is None:
            return [[int(t) for t in self.ids if t is not None] for _ in range(batch)]
        logits = np.asarray(detect([self.start]))
        langs = np.asarray(self.languages, np.int64)
        picked = langs[np.argmax(logits[:, langs], axis=1)]
        out = []
        for lang in picked:
            ids = list(self.ids)
            ids[self.language_slot] = int(lang)
            out.append([int(t) for t in ids if t is not None])
        return out


def _int(v) -> int | None:
    """A token id from a config file, or None: a value no id input can hold (negative, past int32: it overflowed
    numpy when fed, an internal error) is passed over as a missing one, as config_special passes it over."""
    if isinstance(v, list):
        v = v[0] if v else None
    return v if is_token_id(v) else None


def _language_id(language: str, lang_to_id: Mapping[str, int]) -> int:
    key = language if language in lang_to_id else f"<|{language.lower()}|>"
    if key not in lang_to_id:
        codes = ", ".join(k.strip("<|>") for k in list(lang_to_id)[:12])
        raise AttnvizError(f"generation_config.json: language {language!r} is not one of the model's ({codes}, ...)")
    return int(lang_to_id[key])


def from_configs(gen: Mapping, cfg: Mapping) -> SpeechPrompt | None:
    """The forced prompt the configs describe (None when neither names a decoder start token)."""
    start = _int(gen.get("decoder_start_token_id")) if "decoder_start_token_id" in gen else None
    if start is None:
        start = _int(cfg.get("decoder_start_token_id"))
    if start is None:
        return None
    lang_to_id: dict = gen["lang_to_id"] if isinstance(gen.get("lang_to_id"), dict) else {}
    task_to_id: dict = gen["task_to_id"] if isinstance(gen.get("task_to_id"), dict) else {}
    task, language = gen.get("task"), gen.get("language")
    ids: list[int | None] = [start]
    if task is None and language is None:  # the legacy forced ids (transformers ignores them when either is set)
        forced = gen.get("forced_decoder_ids") or cfg.get("forced_decoder_ids") or []
        pos = 1
        for entry in forced if isinstance(forced, list) else []:
            if not (isinstance(entry, list) and len(entry) == 2 and entry[0] == pos):
                break
            ids.append(_int(entry[1]))
            pos += 1
    slot = None
    if isinstance(language, str):
        lang = _language_id(language, lang_to_id)
        if len(ids) > 1:
            ids[1] = lang
        else:
            ids.append(lang)
    elif lang_to_id and (len(ids) <= 1 or ids[1] is None):
        slot = 1
        if len(ids) <= 1:
            ids.append(None)
    tasks = [int(v) for v in task_to_id.values() if isinstance(v, int)]
    if isinstance(task, str):
        if task not in task_to_id:
            raise AttnvizError(f"generation_config.json: task {task!r} is not one of {sorted(task_to_id)}")
        tid = int(task_to_id[task])
        ids = [tid if t in tasks else t for t in ids] if any(t in tasks for t in ids) else [*ids, tid]
    elif isinstance(language, str) and "transcribe" in task_to_id and not any(t in tasks for t in ids):
        ids.append(int(task_to_id["transcribe"]))
    no_ts = _int(gen.get("no_timestamps_token_id"))
    if no_ts is not None and ids[-1] != no_ts:
        ids.append(no_ts)
    langs = tuple(int(v) for v in lang_to_id.values() if isinstance(v, int))
    return SpeechPrompt(tuple(ids), langs if slot is not None else (), slot, _int(cfg.get("max_target_positions")))


def default_steps_in_room(meta: Mapping, steps: int) -> int:
    """A default generation (one the user did not ask for: 32 steps for an encoder-decoder) cut to what a speech
    decoder's positions hold after its forced prompt.  The speech demo's decoder holds 16 positions, so ``attnviz
    figure models/spoken-digits --audio CLIP`` was refused ("give --generate 13 or fewer") for a number it never
    asked for; steps the user gives are still checked, and refused, as they were."""
    from attnviz.core import metadata as md

    most = SpeechPrompt.from_meta(md.section(meta, "speech_prompt")).most_steps()
    return steps if most is None else min(steps, most)
