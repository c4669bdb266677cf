"""Issue 22, the merged decoder as optimum writes it: ``decoder_model_merged.onnx`` is one ``If`` on
``use_cache_branch`` holding the without-past decoder (else) and the with-past decoder (then) as subgraphs
(tests/vlm_models.py: merge_decoders).  The attention sites are found inside the branches and paired; the prompt
runs through the without-past branch and every cached step through the with-past branch (a branch whose logits
are tampered with shows which one ran); maps and greedy tokens equal transformers'."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlm_models as vm  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402

PROMPT = "<s> <image> a photo of the cat"
TOL = 5e-4
BIAS = 1e4  # added to one vocabulary entry's logit in a tampered branch: greedy always picks it there


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((48, 40, 3)) * 255).astype(np.uint8)).save(p)
    return p


@pytest.fixture(scope="module")
def torch_model():
    return vm.build()


def greedy(m, model, image, n):
    """transformers' greedy tokens on the prompt attnviz builds (same ids, same pixel values)."""
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    ids = torch.as_tensor(np.asarray(prep.prompts, np.int64))
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            pixel_values=torch.as_tensor(prep.feeds["pixel_values"]),
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
        )
    return out[0, ids.shape[1] :].tolist(), prep


def test_the_decoder_file_is_an_if_on_use_cache_branch(llava_repo):
    """The fixture really is optimum's merged layout (the rest of this file relies on it)."""
    g = onnx.load(str(llava_repo / "onnx" / "decoder_model_merged.onnx")).graph
    assert [n.op_type for n in g.node] == ["If"] and g.node[0].input[0] == "use_cache_branch"
    branches = {a.name: a.g for a in g.node[0].attribute}
    assert sum(n.op_type == "Softmax" for n in branches["then_branch"].node) == vm.LAYERS
    assert sum(n.op_type == "Softmax" for n in branches["else_branch"].node) == vm.LAYERS
    assert "use_cache_branch" in [i.name for i in g.input]


def test_sites_are_found_in_both_branches_and_paired(llava_repo):
    m = open_model(llava_repo, provider="cpu")
    sites = m.decoder._sites
    assert [(s.stack, s.layer) for s in sites] == [("decoder", 0), ("decoder", 1)]
    for s in sites:
        # each site sits in one branch of the If (node 0 of the outer graph) and its twin in the other
        assert s.twin is not None
        assert {s.g.path[0], s.twin.g.path[0]} == {(0, "then_branch"), (0, "else_branch")}


def _tamper(repo, branch: str, token: int, out):
    """A copy of the repository whose ``branch`` adds BIAS to ``token``'s logit (the other branch untouched)."""
    import shutil

    shutil.copytree(repo, out)
    path = out / "onnx" / "decoder_model_merged.onnx"
    model = onnx.load(str(path))
    g = next(a.g for a in model.graph.node[0].attribute if a.name == branch)
    producer = next(n for n in g.node if "logits" in n.output)
    producer.output[list(producer.output).index("logits")] = "logits_untampered"
    bias = np.zeros(vm.VOCAB_SIZE, np.float32)
    bias[token] = BIAS
    g.initializer.append(numpy_helper.from_array(bias, "tamper_bias"))
    g.node.append(helper.make_node("Add", ["logits_untampered", "tamper_bias"], ["logits"]))
    onnx.save(model, str(path))
    return out


def test_the_prompt_runs_the_no_cache_branch_and_steps_the_cache_branch(llava_repo, image, torch_model, tmp_path):
    """Tamper the with-past branch: the first token (from the prompt's run) is still transformers', every later
    one is the tampered token.  Tamper the without-past branch: the first token is the tampered one."""
    m = open_model(llava_repo, provider="cpu")
    want, _ = greedy(m, torch_model, image, 4)
    then = open_model(_tamper(llava_repo, "then_branch", 7, tmp_path / "then"), provider="cpu")
    r = then.analyze(text=PROMPT, image=str(image), generate=4, use_cache=True)
    assert r.info["generation"] == "kv-cache"
    assert r.info["generated_ids"] == [want[0], 7, 7, 7]
    other = open_model(_tamper(llava_repo, "else_branch", 9, tmp_path / "else"), provider="cpu")
    r = other.analyze(text=PROMPT, image=str(image), generate=1, use_cache=True)
    assert r.info["generated_ids"] == [9]
    # without a cache every step re-runs the whole sequence: the without-past branch only
    r = then.analyze(text=PROMPT, image=str(image), generate=4, use_cache=False)
    assert r.info["generated_ids"] == want


@pytest.mark.parametrize("use_cache", [True, False])
def test_maps_and_greedy_tokens_equal_transformers(llava_repo, image, torch_model, use_cache):
    m = open_model(llava_repo, provider="cpu")
    want, prep = greedy(m, torch_model, image, 5)
    r = m.analyze(text=PROMPT, image=str(image), generate=5, use_cache=use_cache)
    assert r.info["generated_ids"] == want
    full = np.asarray([prep.prompts[0] + want[:-1]], np.int64)
    vision, decoder, _ = vm.reference(torch_model, prep.feeds["pixel_values"], full)
    diffs = [np.abs(got.array() - ref).max() for got, ref in zip(r.maps, [vision[0], *decoder])]
    assert len(diffs) == 3 and max(diffs) < TOL, diffs
