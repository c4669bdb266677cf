"""Gold alignments in the window: which model can be scored, and the one line that sums up the scores."""

from __future__ import annotations

from attnviz import AttnvizError
from attnviz.app.rules import model_kind


def check_gold_model(model) -> None:
    """Gold alignments score cross-attention between source and target words: an encoder-decoder text model."""
    if model is None or model_kind(model) != "encoder-decoder":
        raise AttnvizError("gold alignments score cross-attention: open an encoder-decoder text model first")


def score(model, path):
    """Every cross-attention head scored against a gold test set (``X.gold`` + ``X.src`` + ``X.tgt``)."""
    from attnviz.runtime.align import score_test_set

    check_gold_model(model)
    return score_test_set(model, str(path))


def summary(table: dict) -> str:
    """The status line after scoring: the best head and its AER."""
    best = table["best_head"]
    return (
        f"gold {table['name']}: best head decoder layer {best['layer']} head "
        f"{best['head']}, AER {best['aer']:.3f} ({table['n_sentences']} pairs)"
    )
