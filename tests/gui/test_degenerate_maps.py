"""Finding 6 of issue 9: views dividing by zero or raising with nothing in the window.

Degenerate but well-formed ``.npz`` maps files (as ``attnviz extract`` writes them, built by hand here) are
opened in the real window offscreen; every view is shown under every aggregate, log scale, keep-mass and
special-token setting.  Each either draws or shows one line in the window; no exception may reach
``sys.excepthook`` (pytest-qt's capture) and nothing may be written to stderr.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PySide6")

from attnviz.core.view import MODES


def _site(stack="encoder", kind="self", layer=0, heads=2):
    return {
        "stack": stack,
        "kind": kind,
        "layer": layer,
        "heads": heads,
        "node": f"{stack}/{kind}/{layer}",
        "method": "softmax",
    }


def _rows(a: np.ndarray) -> np.ndarray:
    s = a.sum(-1, keepdims=True)
    return np.divide(a, s, out=np.zeros_like(a), where=s > 0)


def _save(path: Path, maps, sites, tokens=None, key_tokens=None, **extra) -> Path:
    arrays = {f"attn_{i:03d}": np.asarray(m, np.float32) for i, m in enumerate(maps)}
    arrays["sites"] = np.array(json.dumps(sites))
    for name, toks in (("tokens", tokens), ("key_tokens", key_tokens)):
        if toks is not None:
            arrays[name] = np.array(toks, dtype=str)
            arrays[f"{name}_special"] = np.array([t.startswith("<") for t in toks], dtype=bool)
    arrays.update(extra)
    np.savez(path, **arrays)
    return path


def _masked_rows(t):  # a fully masked query row (all zeros), as a padded batch row gives
    a = _rows(np.random.default_rng(0).random((1, 2, 4, 4)))
    a[:, :, 3] = 0.0
    a[:, :, :, 3] = 0.0
    return _save(t / "masked.npz", [a, a], [_site(layer=0), _site(layer=1)], tokens=["<s>", "a", "b", "<pad>"])


def _zeros(t):  # all-zero maps: log scale, keep-mass and rollout over nothing
    a = np.zeros((1, 2, 3, 3))
    return _save(t / "zeros.npz", [a, a], [_site(layer=0), _site(layer=1)], tokens=["a", "b", "c"])


def _one_token(t):  # a 1x1 map: one token, stats over one position
    a = np.ones((1, 2, 1, 1))
    return _save(t / "one.npz", [a, a], [_site(layer=0), _site(layer=1)], tokens=["a"])


def _special_only(t):  # hiding special tokens leaves nothing
    a = _rows(np.ones((1, 2, 2, 2)))
    return _save(t / "special.npz", [a], [_site()], tokens=["<s>", "</s>"])


def _no_tokens(t):  # a 0-token axis
    a = np.zeros((1, 2, 0, 0))
    return _save(t / "empty.npz", [a], [_site()], tokens=[])


def _no_heads(t):  # a block with 0 heads
    a = np.zeros((1, 0, 3, 3))
    return _save(t / "noheads.npz", [a], [_site(heads=0)], tokens=["a", "b", "c"])


def _seq2seq_no_generated(t):  # cross-attention, an empty generated list (Alignment with nothing generated)
    enc = _rows(np.ones((1, 2, 3, 3)))
    dec = _rows(np.tril(np.ones((1, 2, 2, 2))))
    cross = np.zeros((1, 2, 2, 3))
    sites = [_site("encoder", "self"), _site("decoder", "self"), _site("decoder", "cross")]
    return _save(
        t / "mt.npz",
        [enc, dec, cross],
        sites,
        tokens=["<s>", "x"],
        key_tokens=["a", "b", "</s>"],
        generated=np.array([], dtype=str),
    )


def _black_image(t):  # a ViT result over an all-zero image with all-zero maps (overlay of nothing on black)
    a = np.zeros((1, 2, 5, 5))
    return _save(
        t / "vit.npz",
        [a, a],
        [_site(layer=0), _site(layer=1)],
        patch_grid=np.array([2, 2, 1], np.int64),
        image=np.zeros((8, 8, 3), np.uint8),
    )


CASES = {
    f.__name__.strip("_"): f
    for f in (
        _masked_rows,
        _zeros,
        _one_token,
        _special_only,
        _no_tokens,
        _no_heads,
        _seq2seq_no_generated,
        _black_image,
    )
}


REFUSED = {"no_tokens", "no_heads"}


@pytest.fixture
def real_window(qtbot, settings):
    from attnviz.gui.main_window import MainWindow

    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.workers.cancel()
    assert w.workers.wait(10000)
    assert w.stats.workers.wait(10000)
    if w.error_box is not None:
        w.error_box.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_degenerate_maps_draw_or_say_one_line(real_window, qtbot, tmp_path, capfd, name):
    from PySide6.QtWidgets import QApplication

    w = real_window
    path = CASES[name](tmp_path)
    with qtbot.capture_exceptions() as raised, warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        w.open_path(path)
        QApplication.processEvents()
        for title in w.views:
            w.select_view(title)
            for mode in MODES:
                for log in (False, True):
                    for keep in (1.0, 0.5, 0.0):
                        for hide in (False, True):
                            w.session.select(mode=mode, log=log, keep=keep, hide_special=hide)
                            QApplication.processEvents()
                            view = w.views[title]
                            text = view.message
                            assert "\n" not in text.strip() and "Traceback" not in text, (title, text)
            if hasattr(w.stats, "workers"):
                assert w.stats.workers.wait(10000)
            QApplication.processEvents()
    assert not raised, [f"{e[0].__name__}: {e[1]}" for e in raised]
    numeric = [str(x.message) for x in warned if issubclass(x.category, RuntimeWarning)]
    assert not numeric, numeric  # "divide by zero", "Mean of empty slice": a view computing on nothing
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Warning" not in err, err
    if name in REFUSED:  # nothing to draw at all: the file is refused with one line naming the empty axis
        assert w.error_box is not None and "empty axis" in w.error_box.text(), name
        assert w.session.result is None
    else:
        assert w.session.result is not None and w.error_box is None
    if w.error_box is not None:
        assert "\n" not in w.error_box.text(), w.error_box.text()


@pytest.mark.parametrize("shape", [(1, 0, 3, 3), (1, 2, 0, 0), (1, 2, 3, 0)])
def test_empty_maps_from_a_run_show_one_line_in_each_view(real_window, qtbot, shape):
    """A result with an empty axis reaching the window by another road than a file (a model run): the view
    model refuses it (``check_not_empty``) and every view shows that one line instead of dividing by zero."""
    from PySide6.QtWidgets import QApplication

    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis

    w = real_window
    site = SiteInfo(**_site(heads=shape[1]))
    result = AttentionResult(
        maps=[DenseMap(np.zeros(shape, np.float32))], sites=[site], tokens=TokenAxis(["a", "b", "c"][: shape[2]])
    )
    with qtbot.capture_exceptions() as raised, warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        w._show_result(result)
        QApplication.processEvents()
        for title in ("Overview", "Head map", "Token links"):
            w.select_view(title)
            QApplication.processEvents()
            assert "empty map" in w.views[title].message and "\n" not in w.views[title].message, title
        w.select_view("Head stats")
        assert w.stats.workers.wait(10000)
        QApplication.processEvents()
        shown = w.stats.message or w.stats.info.text()
        assert "empty map" in shown and "\n" not in shown, shown
    assert not raised, [f"{e[0].__name__}: {e[1]}" for e in raised]
    assert not [x for x in warned if issubclass(x.category, RuntimeWarning)]
