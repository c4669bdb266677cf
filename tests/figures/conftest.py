"""Figure test fixtures: the synthetic results of figure_data.py."""

from __future__ import annotations

import pytest
from figure_data import encdec_result, text_result, vision_result


@pytest.fixture
def text():
    return text_result()


@pytest.fixture
def encdec():
    return encdec_result()


@pytest.fixture
def vision():
    return vision_result()


@pytest.fixture
def captioner():
    return vision_result(decoder=True)
