"""From what a researcher gives (text, text pair, image, raw feeds) to feeds, a greedy generation loop
and a labelled :class:`AttentionResult`.

Generation re-runs the full graph on the growing decoder sequence (no KV cache): with causal masking
the final pass's row *i* is exactly the attention of step *i*, so one pass records every step.
``result.generated[i]`` is the word produced at decoder query position ``prompt_len - 1 + i``;
``result.key_tokens`` (or ``tokens`` for decoder-only models) are the decoder inputs.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, PatchGrid, TokenAxis
from attnviz.runtime import inputs as ip

ENCODER_TEXT_ROLES = ("tokens", "mask", "token_types", "positions")


def _ids_array(ids, dtype) -> np.ndarray:
    return np.asarray([ids], dtype=np.dtype(dtype) if dtype.startswith("int") else np.int64)


def _by_role(model, role: str):
    for i in model.inputs:
        if model.roles[i.name] == role:
            return i
    return None


def _fill_text_inputs(model, feeds: dict, ids: list[int], type_ids: list[int] | None, roles_map: dict[str, str]):
    """Fill token / mask / type / position inputs for one sequence.  roles_map maps generic role -> input role."""
    n = len(ids)
    for i in model.inputs:
        role = model.roles[i.name]
        if role == roles_map.get("tokens"):
            feeds[i.name] = _ids_array(ids, i.dtype)
        elif role == roles_map.get("mask"):
            feeds[i.name] = np.ones((1, n), dtype=np.dtype(i.dtype) if i.dtype in ("int64", "int32", "float32", "bool") else np.int64)
        elif role == roles_map.get("token_types") and type_ids is not None:
            feeds[i.name] = _ids_array(type_ids, i.dtype)
        elif role == roles_map.get("positions"):
            feeds[i.name] = _ids_array(list(range(n)), i.dtype)


def _fill_auxiliary(model, feeds: dict, dec_len: int | None):
    """Empty KV cache, cache positions and other inputs a plain forward pass needs."""
    for i in model.inputs:
        if i.name in feeds:
            continue
        role = model.roles[i.name]
        if role == "past":
            shape = [1 if (isinstance(d, str) and ax == 0) else (0 if isinstance(d, str) else d) for ax, d in enumerate(i.shape)]
            if any(isinstance(d, str) for d in i.shape[1:-2]) or (len(i.shape) == 4 and isinstance(i.shape[-1], str)):
                raise AttnvizError(f"input {i.name!r} is a KV cache with unknown head sizes; export the model without past key values")
            feeds[i.name] = np.zeros(shape, dtype=np.dtype(i.dtype))
        elif role == "cache_position" and dec_len:
            feeds[i.name] = np.arange(dec_len, dtype=np.dtype(i.dtype))
        elif i.dtype == "bool" and i.rank == 0:  # use_cache_branch of merged decoders
            feeds[i.name] = np.array(False)


def _labels(tok, ids) -> TokenAxis:
    if tok is None:
        return TokenAxis([str(int(i)) for i in ids])
    return TokenAxis([tok.label(i) for i in ids], [tok.is_special(i) for i in ids])


def _patch_axis(grid: PatchGrid, n: int) -> TokenAxis:
    labels, special = [], []
    for p in range(n):
        if p < grid.offset:
            labels.append("[CLS]" if p == 0 else f"[REG{p}]")
            special.append(True)
        elif p < grid.offset + grid.n:
            r, c = divmod(p - grid.offset, grid.cols)
            labels.append(f"({r},{c})")
            special.append(False)
        else:
            labels.append(f"[{p}]")
            special.append(True)
    return TokenAxis(labels, special)


def _logits_name(model) -> str:
    names = [o.name for o in model.outputs]
    return "logits" if "logits" in names else names[0]


def _special(model) -> dict:
    sp = model.meta.get("special")
    return sp if isinstance(sp, dict) else {}


def analyze(model, text=None, text_pair=None, image=None, feeds=None, generate=0, mode="auto",
            image_size=None, image_mean=None, image_std=None, progress=None, cancelled=None) -> AttentionResult:
    t0 = time.perf_counter()
    if not model._sites:
        raise AttnvizError(f"{model.path.name}: {model.no_attention_reason}")
    if generate < 0:
        raise AttnvizError("--generate must be 0 or more steps")
    if feeds is None and not model._stack_confirmed and len({s.stack for s in model._sites}) == 1:
        model.probe()  # a causal map marks a decoder; static guesses can miss hand-built masks
    kind = model.kind
    roles = model.roles
    if isinstance(feeds, (str, Path)):
        feeds = ip.load_feeds(feeds)
    f: dict[str, np.ndarray] = dict(feeds or {})
    notes: list[str] = []
    src_axis = None
    shown = None
    src_tok = tgt_tok = None
    sp = _special(model)

    # image ------------------------------------------------------------------
    img_in = _by_role(model, "image")
    if image is not None:
        if img_in is None:
            raise AttnvizError(f"{model.path.name} takes no image input (its inputs: {', '.join(i.name for i in model.inputs)}); give --text instead")
        spec = ip.image_spec(model.meta, img_in.shape, image_size, image_mean, image_std)
        if spec.source == "defaults" and image_size is None:  # said with any run failure: the likely cause
            notes.append(f"the model does not declare its image size, so the image was resized to {spec.height}x{spec.width}; "
                         "give --image-size H W")
        if isinstance(image, np.ndarray):
            from PIL import Image as _I
            import tempfile, os
            fd, tmp = tempfile.mkstemp(suffix=".png")
            os.close(fd)
            _I.fromarray(image).save(tmp)
            try:
                f[img_in.name], shown = ip.load_image(tmp, spec)
            finally:
                os.unlink(tmp)
        else:
            f[img_in.name], shown = ip.load_image(image, spec)
    elif img_in is not None and img_in.name not in f:
        raise AttnvizError(f"{model.path.name} takes an image ({img_in.describe()}); give --image PATH")

    # text -------------------------------------------------------------------
    series_in = _by_role(model, "series")
    dec_in = _by_role(model, "decoder_tokens")
    tok_in = _by_role(model, "tokens")
    # the token input of an image-captioning graph or a decoder-only graph is the decoder's
    decoder_is_tokens = kind in ("vision-decoder", "decoder") and dec_in is None and tok_in is not None
    if decoder_is_tokens:
        dec_in = tok_in
    prompt: list[int] | None = None
    if text is not None:
        if series_in is not None and tok_in is None:
            vals = ip.parse_series(text)
            shape = [1, len(vals)] + ([1] if series_in.rank == 3 else [])
            f[series_in.name] = vals.reshape(shape[: series_in.rank]).astype(np.float32)
            src_axis = TokenAxis([f"{v:g}" for v in vals])
        elif decoder_is_tokens:
            src_tok, tgt_tok = model.tokenizers
            tok = tgt_tok or src_tok
            if tok is None:
                raise AttnvizError(f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or pass --tokenizer FILE")
            enc = tok.encode(text, add_special=kind == "decoder" and False)
            prompt = enc.ids
        elif tok_in is not None:
            src_tok, tgt_tok = model.tokenizers
            if src_tok is None:
                raise AttnvizError(f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or pass --tokenizer FILE")
            pair = None if dec_in is not None else text_pair
            enc = src_tok.encode(text, pair)
            if not enc.ids:
                raise AttnvizError("the text gives no tokens; type some words")
            _fill_text_inputs(model, f, enc.ids, enc.type_ids, {r: r for r in ENCODER_TEXT_ROLES})
            src_axis = TokenAxis(enc.tokens, enc.special)
            limit = getattr(src_tok, "max_length", None)
            if limit and len(enc.ids) > limit:
                notes.append(f"{len(enc.ids)} tokens: longer than the tokenizer's configured limit of {limit}; kept them all")
        else:
            raise AttnvizError(f"{model.path.name} takes no text input (its inputs: {', '.join(i.describe() for i in model.inputs)})")
    elif tok_in is not None and tok_in.name in f and np.ndim(f[tok_in.name]) == 2 and not decoder_is_tokens:
        src_tok, tgt_tok = _tokenizers_or_none(model)
        src_axis = _labels(src_tok, f[tok_in.name][0])
    elif series_in is not None and series_in.name in f and np.ndim(f[series_in.name]) >= 2:
        src_axis = TokenAxis([f"{v:g}" for v in np.ravel(f[series_in.name][0])])

    # decoder prompt ---------------------------------------------------------------
    if dec_in is not None:
        if src_tok is None and tgt_tok is None:
            src_tok, tgt_tok = _tokenizers_or_none(model)
        tgt_tok = tgt_tok or src_tok
        if dec_in.name in f and prompt is None and np.ndim(f[dec_in.name]) == 2:
            prompt = [int(x) for x in f[dec_in.name][0]]
        elif prompt is None:
            start = sp.get("decoder_start", sp.get("bos"))
            if start is None:
                start = 0
            prompt = [int(start)]
            if text_pair:
                if tgt_tok is None:
                    raise AttnvizError("no target tokenizer to encode --text-pair; put tokenizer.json beside the model")
                prompt += tgt_tok.encode(text_pair, add_special=False).ids
        if kind == "decoder" and not prompt:
            raise AttnvizError("a decoder needs a prompt: give --text")
    elif generate:
        raise AttnvizError(f"{model.path.name} is an {kind} model with no decoder input; --generate needs a decoder or encoder-decoder model")

    def dec_feeds(ids):
        g = dict(f)
        if decoder_is_tokens:
            _fill_text_inputs(model, g, ids, None, {r: r for r in ENCODER_TEXT_ROLES})
        else:
            _fill_text_inputs(model, g, ids, None, {"tokens": "decoder_tokens", "mask": "decoder_mask"})
        _fill_auxiliary(model, g, len(ids))
        return g

    generated: list[int] = []
    gen_s = 0.0
    if dec_in is not None and generate:
        tg = time.perf_counter()
        # the instrumented session asked for logits only: no second copy of the weights, no maps per step
        sess, _ = model._session("dense")
        lname = _logits_name(model)
        eos = sp.get("eos")
        ids = list(prompt)
        for step in range(generate):
            if cancelled is not None and cancelled():
                from attnviz.runtime.model import Cancelled

                raise Cancelled("cancelled")
            if progress is not None:
                progress(int(100 * step / generate), f"generating: step {step + 1} of {generate}")
            g = model.check_feeds(dec_feeds(ids))
            try:
                logits = sess.run([lname], g)[0]
            except Exception as e:
                from attnviz.runtime.model import _ort_message

                raise AttnvizError(f"the model failed to run during generation: {_ort_message(e)}") from None
            last = logits[0, -1] if logits.ndim == 3 else logits[0]
            nxt = int(np.argmax(last))
            generated.append(nxt)
            if eos is not None and nxt == int(eos):
                break
            ids.append(nxt)
        gen_s = time.perf_counter() - tg
        final = list(prompt) + generated[:-1]
    else:
        final = prompt
    if dec_in is not None:
        f = dec_feeds(final)
    else:
        _fill_auxiliary(model, f, None)

    if progress is not None:
        progress(100 if generate else -1, "extracting attention…")
    try:
        result = model.run(f, mode=mode)
    except AttnvizError as e:
        if notes:  # e.g. positions beyond the model's table: say why
            raise AttnvizError(f"{e} ({'; '.join(notes)})") from None
        raise
    if notes:
        result.info["notes"] = result.info.get("notes", []) + notes

    # axes -------------------------------------------------------------------------------
    dec_axis = _labels(tgt_tok, final) if dec_in is not None else None
    if decoder_is_tokens and kind == "decoder":
        result.tokens = dec_axis
    else:
        result.tokens = src_axis
        result.key_tokens = dec_axis
    if img_in is not None:
        n_keys = None
        enc_sites = [i for i, s in enumerate(result.sites) if s.stack == "encoder"]
        cross_sites = [i for i, s in enumerate(result.sites) if s.kind == "cross"]
        if enc_sites:
            n_keys = result.maps[enc_sites[-1]].shape[-1]
        elif cross_sites:
            n_keys = result.maps[cross_sites[-1]].shape[-1]
        from attnviz.runtime.model import grid_for

        hw = tuple(np.shape(f[img_in.name])[-2:]) if img_in.name in f else None
        grid = grid_for(model, n_keys, hw) if n_keys else None
        result.patch_grid = grid
        if grid is not None:
            result.tokens = _patch_axis(grid, n_keys)
        result.image = shown
    if dec_in is not None:
        result.prompt_len = len(prompt)
        result.generated = [tgt_tok.label(i) if tgt_tok else str(i) for i in generated]
        result.info["generated_ids"] = generated
    result.info.update({"kind": kind, "generate_s": gen_s, "total_s": time.perf_counter() - t0,
                        "text": text, "text_pair": text_pair, "image": str(image) if isinstance(image, (str, Path)) else None})
    return result


def _tokenizers_or_none(model):
    try:
        return model.tokenizers
    except AttnvizError:
        return None, None
