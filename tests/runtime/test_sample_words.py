"""A model's sample input: what ``attnviz figure`` says it used when no input is given (the sample's values by what
the model reads them as), and where the sample image named in its metadata is looked for."""

import pytest

from attnviz.runtime.sample import Sample, sample_input


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


def _layout(tmp_path):
    """A checkout-like tree: ``resources/samples/demo.png`` beside ``models/``, and a run folder ``run/``."""
    for d in ("resources/samples", "models", "run", "cwd/resources/samples"):
        (tmp_path / d).mkdir(parents=True)
    for f in ("resources/samples/demo.png", "run/sample.png", "cwd/resources/samples/demo.png", "secret.png"):
        (tmp_path / f).write_bytes(b"png")
    return tmp_path


@pytest.mark.parametrize(
    ("model", "named", "found"),
    [
        ("models/m.onnx", "resources/samples/demo.png", "resources/samples/demo.png"),  # the checkout's demos
        ("run/model.onnx", "resources/samples/demo.png", "run/sample.png"),  # what `attnviz train` wrote
        ("far/away/m.onnx", "resources/samples/demo.png", None),  # nowhere: not the current directory's copy
        ("models/m.onnx", "../secret.png", None),  # out of the model's folder
        ("models/m.onnx", "{root}/secret.png", None),  # absolute
    ],
)
def test_the_sample_image_is_looked_for_in_the_models_folder_only(tmp_path, monkeypatch, model, named, found):
    root = _layout(tmp_path)
    monkeypatch.chdir(root / "cwd")  # holds a resources/samples/demo.png that must never be picked
    values = sample_input({"sample": {"image": named.format(root=root), "text": "t"}}, root / model)
    assert values.get("image") == (str(root / found) if found else None)
    assert values["text"] == "t"  # the rest of the sample stands


def test_a_link_in_the_models_folder_does_not_lead_the_sample_out_of_it(tmp_path):
    """The metadata names ``sample.png`` in the model's folder, but that is a link to a file outside: refused, as
    external data leaving the folder is (runtime/loading.py)."""
    root = _layout(tmp_path)
    (root / "run" / "sample.png").unlink()
    (root / "run" / "sample.png").symlink_to(root / "secret.png")
    (root / "run" / "inside.png").write_bytes(b"png")
    (root / "run" / "alias.png").symlink_to(root / "run" / "inside.png")
    assert "image" not in sample_input({"sample": {"image": "sample.png"}}, root / "run" / "model.onnx")
    # a link that stays inside the folder is fine
    found = sample_input({"sample": {"image": "alias.png"}}, root / "run" / "model.onnx")
    assert found["image"] == str(root / "run" / "alias.png")
