"""Finding a token in a long map by its text or its position (the window's find box on Head map and Token links):
text without case and without the tokenizer's word markers, a position as the read-out counts it (the model's,
not the drawn row's, once special tokens are hidden), Enter again stepping to the next occurrence and round."""

from __future__ import annotations

from attnviz.core.view import Found, find_token

LABELS = ["[CLS]", "ĠThe", "Ġcat", "Ġsat", "interpret", "##ability", "▁cat", "CAT", "[SEP]"]
POS = list(range(len(LABELS)))


def test_text_without_case_or_markers_steps_through_every_occurrence():
    assert find_token(LABELS, POS, "cat") == Found(2, 3, 1)
    assert find_token(LABELS, POS, "cat", start=3) == Found(6, 3, 2)
    assert find_token(LABELS, POS, "Cat", start=7) == Found(7, 3, 3)
    assert find_token(LABELS, POS, "cat", start=8) == Found(2, 3, 1)  # round to the first
    assert find_token(LABELS, POS, "  the ") == Found(1, 1, 1)
    assert find_token(LABELS, POS, "ability") == find_token(LABELS, POS, "##ability") == Found(5, 1, 1)
    assert find_token(LABELS, POS, "[sep]") == Found(8, 1, 1)


def test_a_position_is_the_models_not_the_drawn_rows():
    labels = ["ĠThe", "Ġcat", "Ġsat"]  # [CLS] (position 0) hidden: the rows hold positions 1..3
    pos = [1, 2, 3]
    assert find_token(labels, pos, "2") == Found(1, 1, 1)
    assert find_token(labels, pos, "#3") == Found(2, 1, 1)
    assert find_token(labels, pos, "#0") is None  # hidden: no row holds it


def test_a_number_no_row_is_at_may_be_a_tokens_text():
    labels = ["[CLS]", "in", "1999", "[SEP]"]
    assert find_token(labels, list(range(4)), "1999") == Found(2, 1, 1)
    assert find_token(labels, list(range(4)), "#1999") is None


def test_nothing_typed_or_nothing_there():
    assert find_token(LABELS, POS, "") is None
    assert find_token(LABELS, POS, "   ") is None
    assert find_token(LABELS, POS, "dog") is None
