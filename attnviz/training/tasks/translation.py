"""``translation``: Greek → English New Testament; ``translation-synthetic``: a reordering toy pair for CI.

Both train an encoder-decoder on subword ids (WordPiece tokenizers trained on the training split, see
:mod:`attnviz.training.data_translation`) and score it on held-out sentences with

* ``bleu``: corpus BLEU of greedy translations against the reference (13a tokenisation, see
  :mod:`attnviz.training.metrics`);
* ``aer``: alignment error rate of each decoder layer's cross-attention against the gold word alignment,
  teacher-forced on the reference (rows = the target subword each decoder position *predicts*, subwords merged
  to words, argmax source word per target word; punctuation the annotators never align is skipped), per
  layer, per head, for the best head and for the mean of all heads and layers.

The tokenizers are part of the model: they are trained once per process (WordPiece training breaks ties
non-deterministically, so a re-run may differ in a handful of rare subwords), embedded in the ONNX file
(``attnviz.tokenizer`` / ``attnviz.target_tokenizer``) and restored from there by :meth:`restore` before
``attnviz eval`` rebuilds the held-out split.
"""

from __future__ import annotations

import numpy as np

from attnviz import AttnvizError
from attnviz.core import align
from attnviz.training import data_translation as dt
from attnviz.training import metrics as M
from attnviz.training.config import preset_configs
from attnviz.training.layout import cross_attention_indices
from attnviz.training.runners import batched, take
from attnviz.training.tasks import Task, feeds_of, greedy_decode, trim_padding

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3  # dt.SPECIALS order, both vocabularies
IGNORE = -100


def subword_links(links, tgt_word_ids: np.ndarray, src_word_ids: np.ndarray) -> np.ndarray:
    """``uint8 [Tt, Ts]``: 1 where the word of decoder row t (``tgt_word_ids``) is linked to the word of source
    subword s; rows / columns of word id -1 (specials, padding) stay 0."""
    nt = int(max(tgt_word_ids.max(initial=-1), max((j for _, j in links), default=-1))) + 1
    ns = int(max(src_word_ids.max(initial=-1), max((i for i, _ in links), default=-1))) + 1
    words = np.zeros((nt + 1, ns + 1), np.uint8)  # last row / column: the -1 ids
    for i, j in links:
        words[j, i] = 1
    return words[tgt_word_ids][:, src_word_ids]


class _TranslationBase(Task):
    """Shared by the NT and the synthetic pair: data encoding, evaluation, metadata."""

    src_vocab = 3000
    tgt_vocab = 3000
    greek = True  # source normalisation: lower-case + strip accents
    max_train_tokens = 64  # training pairs longer than this (either side, with BOS/EOS) are left out
    max_len = 128  # position table; held-out pairs are truncated to it
    sample_id = ""  # held-out pair whose source is the model's sample input (default: the first)

    def __init__(self):
        self.tokenizers: dt.TranslationTokenizers | None = None
        self._splits: dt.Split | None = None
        self._pairs: dict[str, list[dt.AlignedPair]] = {}
        self.declared: tuple[list, str] | None = None  # ([[layer, head], ...], row convention) of guided heads

    # -- data ------------------------------------------------------------------
    def load_split(self) -> dt.Split:
        raise NotImplementedError

    def _split(self) -> dt.Split:
        if self._splits is None:
            self._splits = self.load_split()
        return self._splits

    def _tok(self) -> dt.TranslationTokenizers:
        if self.tokenizers is None:
            self.tokenizers = dt.train_tokenizers(self._split().train, self.src_vocab, self.tgt_vocab, greek=self.greek)
        return self.tokenizers

    def restore(self, meta: dict) -> None:
        """Take the tokenizers embedded in an exported model (``attnviz eval``)."""
        from attnviz.runtime.inputs import load_tokenizer

        src, tgt = meta.get("tokenizer"), meta.get("target_tokenizer")
        if not src or not tgt:
            raise AttnvizError(
                "this translation model has no embedded tokenizers (attnviz.tokenizer / "
                "attnviz.target_tokenizer); re-export it with `attnviz train translation`"
            )
        fix = "re-export it with `attnviz train translation`"
        self.tokenizers = dt.TranslationTokenizers(
            load_tokenizer(src, "the model's attnviz.tokenizer", fix),
            load_tokenizer(tgt, "the model's attnviz.target_tokenizer", fix),
            ("attnviz.tokenizer in the model's metadata", "attnviz.target_tokenizer in the model's metadata"),
        )

    def vocab_sizes(self) -> tuple[int, int]:
        """Vocabulary sizes of the tokenizers; the requested sizes when the data is not installed (so the
        configs can be listed anywhere; building the data then raises the install hint)."""
        try:
            t = self._tok()
        except AttnvizError:
            return self.src_vocab, self.tgt_vocab
        return t.source.get_vocab_size(), t.target.get_vocab_size()

    def _check_vocab(self, mcfg) -> None:
        have = self.vocab_sizes()
        if (mcfg.vocab_size, mcfg.target_vocab) != have:
            raise AttnvizError(
                f"{self.name}: the model expects vocabularies of {mcfg.vocab_size}/{mcfg.target_vocab} "
                f"pieces but the tokenizers have {have[0]}/{have[1]}; retrain with `attnviz train {self.name}`"
            )

    def encode(
        self, pairs: list[dt.AlignedPair], max_tokens: int, drop_long: bool, links_of=None
    ) -> dict[str, np.ndarray]:
        """Padded arrays for the model plus the word maps and gold links the evaluation needs.

        ``decoder_input_ids`` = ``[BOS] y``, ``labels`` = ``y [EOS]`` (-100 = padding);
        ``src_word_ids`` [N, Ts] / ``tgt_word_ids`` [N, Tt]: word index of each source subword / of the
        subword each decoder position predicts (-1: none); ``gold`` [N, G, 2]: (src word, tgt word), -1 padded;
        ``tgt_skip`` [N, W]: target words outside the alignment task; ``index`` [N]: into the split's pair list;
        ``align`` [N, Tt, Ts] uint8: guided-alignment labels (:mod:`attnviz.training.guided`, predict
        convention) from ``links_of(i, pair)`` (default: the pair's gold links).
        """
        tok = self._tok()
        rows = []
        for i, p in enumerate(pairs):
            e = tok.encode_pair(p)
            if drop_long and (len(e["src_ids"]) > max_tokens or len(e["tgt_ids"]) > max_tokens):
                continue
            rows.append((i, p, e))
        ts = min(max_tokens, max(len(e["src_ids"]) for _, _, e in rows))
        tt = min(max_tokens, max(len(e["tgt_ids"]) for _, _, e in rows)) - 1  # decoder length
        n = len(rows)
        g = max(len(p.links) for _, p, _ in rows)
        w = max(len(p.tgt) for _, p, _ in rows)
        out: dict[str, np.ndarray] = {
            "input_ids": np.zeros((n, ts), np.int64),
            "attention_mask": np.zeros((n, ts), np.int64),
            "decoder_input_ids": np.zeros((n, tt), np.int64),
            "labels": np.full((n, tt), IGNORE, np.int64),
            "src_word_ids": np.full((n, ts), -1, np.int64),
            "tgt_word_ids": np.full((n, tt), -1, np.int64),
            "gold": np.full((n, g, 2), -1, np.int64),
            "tgt_skip": np.zeros((n, w), np.int64),
            "n_words": np.zeros((n, 2), np.int64),
            "index": np.zeros(n, np.int64),
            "align": np.zeros((n, tt, ts), np.uint8),
        }
        for r, (i, p, e) in enumerate(rows):
            s = e["src_ids"][:ts]
            out["input_ids"][r, : len(s)] = s
            out["attention_mask"][r, : len(s)] = 1
            out["src_word_ids"][r, : len(s)] = e["src_words"][: len(s)]
            t = e["tgt_ids"][: tt + 1]
            out["decoder_input_ids"][r, : len(t) - 1] = t[:-1]
            out["labels"][r, : len(t) - 1] = t[1:]
            out["tgt_word_ids"][r, : len(t) - 1] = e["tgt_words"][1 : len(t)]
            links = sorted(p.links)
            out["gold"][r, : len(links)] = links
            out["tgt_skip"][r, : len(p.tgt)] = p.tgt_skip or (False,) * len(p.tgt)
            out["n_words"][r] = (len(p.src), len(p.tgt))
            out["index"][r] = i
            out["align"][r] = subword_links(
                p.links if links_of is None else links_of(i, p), out["tgt_word_ids"][r], out["src_word_ids"][r]
            )
        return out

    def collate(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = trim_padding(batch)
        if "align" in out:  # cut the label grid to the trimmed decoder / source lengths
            out["align"] = out["align"][:, : out["labels"].shape[1], : out["input_ids"].shape[1]]
        return out

    def make_split(self, split, mcfg, tcfg):
        # the heads the config trains as aligners, for evaluate() (training and `attnviz eval` both build here)
        self.declared = ([list(x) for x in tcfg.align_heads], tcfg.align_convention) if tcfg.align_weight else None
        sp = self._split()
        self._check_vocab(mcfg)
        pairs = sp.train if split in ("train", "validation") else sp.test
        n = tcfg.n_train if split in ("train", "validation") else tcfg.n_test
        pairs = pairs[:n] if n and n < len(pairs) else pairs
        if tcfg.validation:  # carved out of the training verses; the test split is never looked at
            fit, val = dt.carve_validation(pairs, tcfg.validation)
            pairs = val if split == "validation" else fit if split == "train" else pairs
        elif split == "validation":
            raise AttnvizError(f"{self.name}: a validation split needs TrainConfig.validation > 0")
        self._pairs[split] = pairs
        if split == "train":
            if tcfg.gloss_pairs:  # word-by-word gloss renderings of the same training verses, links known
                pairs = pairs + [g for g in map(dt.gloss_pair, pairs) if g is not None]
            return self.encode(pairs, self.max_train_tokens, drop_long=True)
        return self.encode(pairs, mcfg.max_len, drop_long=False)

    # -- evaluation ------------------------------------------------------------
    def translate(
        self, runner, data: dict[str, np.ndarray], max_new: int | None = None, batch_size: int = 64
    ) -> list[str]:
        """Greedy translations (detokenised text) of every row of ``data``."""
        tok = self._tok().target
        out = []
        n = len(data["input_ids"])
        for s in batched(n, batch_size):
            b = take(data, s)
            enc = {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]}
            # room for the reference length plus slack; never past the position table
            limit = max_new or int(min((b["labels"] != IGNORE).sum(1).max() * 1.5 + 4, self.max_len - 1))
            gen = greedy_decode(runner, enc, BOS_ID, EOS_ID, limit)
            for row in gen:
                ids = []
                for t in row[1:]:
                    if t == EOS_ID:
                        break
                    ids.append(int(t))
                out.append(tok.decode(ids))
        return out

    def alignment_samples(
        self, runner, data: dict[str, np.ndarray], mcfg, convention: str = "predict", batch_size: int = 64
    ):
        """Teacher-forced cross-attention of every example, as :class:`attnviz.core.align.AlignmentSample`.

        ``convention``: which target word a decoder row stands for (:func:`attnviz.core.align.row_words`).
        """
        idx = cross_attention_indices(mcfg)
        n = len(data["input_ids"])
        for s in batched(n, batch_size):
            b = take(data, s)
            maps = runner.attention(feeds_of(b, mcfg))
            cross = np.stack([maps[i] for i in idx], axis=1)  # (B, L, H, Tt, Ts)
            for r in range(len(b["input_ids"])):
                ts = int(b["attention_mask"][r].sum())
                tt = int((b["labels"][r] != IGNORE).sum())
                # tgt_word_ids is already in the predict convention (word of labels[t]); its first tt-1 entries
                # are the target subwords, the last one EOS
                qw = align.row_words(b["tgt_word_ids"][r, : tt - 1], convention, n_rows=tt)
                n_src, n_tgt = (int(v) for v in b["n_words"][r])
                gold = {(int(a), int(c)) for a, c in b["gold"][r] if a >= 0}
                yield align.AlignmentSample(
                    cross[r, :, :, :tt, :ts],
                    qw,
                    b["src_word_ids"][r, :ts],
                    n_src,
                    n_tgt,
                    sure=gold,
                    skip=b["tgt_skip"][r, :n_tgt].astype(bool),
                )

    val_key = "aer_select"
    decodes = True

    def validate(self, runner, data, mcfg):
        """Model selection, cheap (one teacher-forced pass, no decoding): AER of the declared heads in their own
        convention (without guided alignment: the best head, input convention) on the validation split."""
        heads, conv = self.declared if self.declared is not None else (None, "input")
        table = M.alignment_table(self.alignment_samples(runner, data, mcfg, conv))
        out = {"convention": conv, "aer_best_head": table["best_head"]}
        if heads is None:
            out["aer_select"] = table["best_head"]["aer"]
        else:
            per = [table["heads"][lay][h] for lay, h in heads]
            out["aer_declared"] = {"heads": heads, "aer": per}
            out["aer_select"] = float(min(per))
        if self.val_bleu:  # greedy decoding: the slow part, only when a BLEU floor takes part in selection
            refs = [self._pairs["validation"][int(i)].text() for i in data["index"]]
            out["bleu"] = M.corpus_bleu(self.translate(runner, data), refs)["bleu"]
        return out

    def evaluate(self, runner, data, mcfg):
        pairs = self._pairs.get("test") or self._split().test
        refs = [pairs[int(i)].text() for i in data["index"]]
        hyps = self.translate(runner, data)
        bleu = M.corpus_bleu(hyps, refs)
        tables = {
            conv: M.alignment_table(self.alignment_samples(runner, data, mcfg, conv)) for conv in align.CONVENTIONS
        }
        table, table_in = tables["predict"], tables["input"]
        # context: link target word j to the source word at the same relative position
        diag = M.AERCounter()
        for i in data["index"]:
            p = pairs[int(i)]
            diag.add(align.diagonal_links(len(p.src), len(p.tgt), p.tgt_skip), p.links)
        out = {
            "bleu": bleu["bleu"],
            "bleu_detail": {k: bleu[k] for k in ("precisions", "bp", "ratio")},
            "aer_best_head": table["best_head"]["aer"],
            "aer_best_layer": table["best_layer"]["aer"],
            "aer_average": table["average"],
            "aer_diagonal_baseline": diag.aer,
            "aer": table,
            "aer_input_convention": table_in,
            "examples": [{"reference": r, "translation": h} for r, h in list(zip(refs, hyps))[:3]],
            "n": len(refs),
        }
        if self.declared is not None:  # the heads trained as aligners, read in their own convention
            heads, conv = self.declared
            per = [tables[conv]["heads"][lay][h] for lay, h in heads]
            k = int(np.argmin(per))
            out["aer_declared"] = {
                "heads": heads,
                "convention": conv,
                "aer": per,
                "best": {"layer": heads[k][0], "head": heads[k][1], "aer": per[k]},
            }
        return out

    # -- export ----------------------------------------------------------------
    def metadata(self, mcfg):
        tok = self._tok()
        src_vocab = sorted(tok.source.get_vocab().items(), key=lambda kv: kv[1])
        tgt_vocab = sorted(tok.target.get_vocab().items(), key=lambda kv: kv[1])
        test = self._split().test
        sample = next((p for p in test if p.id == self.sample_id), test[0])
        return {
            "vocab": {"source": [t for t, _ in src_vocab], "target": [t for t, _ in tgt_vocab]},
            "tokenizer": tok.source.to_str(),
            "target_tokenizer": tok.target.to_str(),
            "special": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
            "sample": {"text": " ".join(sample.src)},
        }

    def example_feeds(self, mcfg, tcfg):
        sp = self._split()
        data = self.encode(sp.test[:3], mcfg.max_len, drop_long=False)
        return feeds_of(data, mcfg)


class Translation(_TranslationBase):
    name = "translation"
    summary = (
        "Greek -> English New Testament (SBLGNT -> BSB) with gold word alignments; "
        "needs `pip install --no-deps bible-alignments`"
    )
    target = "BLEU and cross-attention AER per layer/head vs the gold (eflomal: AER ~0.34)"
    target_key = "bleu"
    sample_id = "40005008"  # Matthew 5:8, held out: "Blessed are the pure in heart, for they will see God."

    def load_split(self):
        return dt.split_pairs(dt.load_bible())

    def configs(self, preset):
        vs, vt = self.vocab_sizes()
        model = dict(
            arch="encoder-decoder",
            head="lm",
            vocab_size=vs,
            tgt_vocab_size=vt,
            max_len=self.max_len,
            positions="sinusoidal",
        )
        try:
            sp = self._split()
            n_train, n_test = len(sp.train), len(sp.test)
        except AttnvizError:  # not installed: list the configs anyway; training says how to install it
            n_train, n_test = 7391, 528
        train = dict(task=self.name, n_train=n_train, n_test=n_test)  # the whole NT split
        if preset == "demo":
            # ~25 min on one CPU thread (2 shared cores); the data is small (7.4k verses, 26 epochs)
            model.update(d_model=96, n_heads=4, n_layers=3, n_dec_layers=3, d_ff=192, dropout=0.1)
            train.update(
                steps=9000,
                batch_size=32,
                lr=1.5e-3,
                warmup=300,
                checkpoint_every=250,
                align_weight=0.5,
                align_heads=[[1, 0], [2, 0]],
                align_convention="input",
            )
        else:
            train.update(n_train=256, n_test=32)
        return preset_configs(preset, model, train)


class TranslationSynthetic(_TranslationBase):
    name = "translation-synthetic"
    summary = "toy translation: SVO + adjective-noun -> SOV + noun-adjective, gold alignment by construction (CI)"
    target = "BLEU ~100, AER of the best head near 0"
    target_key = "aer_best_head"
    src_vocab = 200
    tgt_vocab = 200
    greek = False
    max_len = 32
    max_train_tokens = 32

    def load_split(self):
        return dt.synthetic_split(4000, 300, seed=0)

    def configs(self, preset):
        vs, vt = self.vocab_sizes()
        model = dict(arch="encoder-decoder", head="lm", vocab_size=vs, tgt_vocab_size=vt, max_len=self.max_len)
        train = dict(task=self.name, n_train=4000, n_test=300)
        if preset == "demo":
            train.update(steps=1500, batch_size=64, lr=2e-3, warmup=100)
        else:
            train.update(n_train=512, n_test=64)
        return preset_configs(preset, model, train)
