"""What ``attnviz figure`` says it used when no input is given: the sample's values by what the model reads them as."""

import pytest

from attnviz.runtime.sample import Sample


@pytest.mark.parametrize(
    ("values", "roles", "said"),
    [
        ({"text": "0.1 0.2"}, {"series"}, "numeric series"),
        ({"text": "7 2 9"}, {"tokens", "mask"}, "text"),
        ({"text": "a cat"}, {"image", "tokens"}, "text"),  # a caption, not a series
        ({"text": "ab", "text_pair": "cd"}, {"tokens", "decoder_tokens"}, "text, text pair"),
        ({"image": "x.png", "generate": 8}, {"image", "decoder_tokens"}, "image, generate 8"),
    ],
)
def test_describe_names_each_value_by_what_it_is(values, roles, said):
    assert Sample(values, frozenset(roles)).describe() == said
