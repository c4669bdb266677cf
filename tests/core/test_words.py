"""The indefinite article before a name only known at run time (model kinds, dtypes, file kinds)."""

import pytest

from attnviz.core.words import with_article


@pytest.mark.parametrize(
    ("word", "want"),
    [
        ("encoder", "an encoder"),
        ("encoder-decoder", "an encoder-decoder"),
        ("image", "an image"),
        ("object", "an object"),
        ("decoder", "a decoder"),
        ("vision", "a vision"),
        ("run config", "a run config"),
        ("", "a "),
    ],
)
def test_the_first_letter_picks_a_or_an(word, want):
    assert with_article(word) == want
