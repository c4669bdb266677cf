"""A second, small virtual environment for exporting with Hugging Face optimum.

optimum-onnx 0.1 needs ``transformers<4.58`` while attnviz's tests run on transformers 5.x, so exports happen in a
venv that reuses the running interpreter's torch/onnx (:mod:`child_venv`: the test run's own venv, not only the
base interpreter's packages) and pins only transformers + optimum-onnx.  It is built once under
``~/.cache/attnviz-tests`` (keyed on the pins, the Python version and the running interpreter's prefix, since it
points at that interpreter's packages), so a fresh clone (CI included) builds it on first use and later runs reuse it.  Exports run there through ``optimum-cli``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import child_venv

PINS = ("transformers>=4.45,<4.58", "optimum-onnx==0.1.0")
CACHE = Path(os.environ.get("ATTNVIZ_TEST_CACHE", Path.home() / ".cache" / "attnviz-tests"))


def venv_dir() -> Path:
    key = hashlib.sha1((" ".join(PINS) + sys.version + sys.prefix + child_venv.PTH).encode()).hexdigest()[:10]
    return CACHE / f"optimum-venv-{key}"


def python() -> Path:
    """The venv's interpreter, building the venv first when it is missing (a few minutes, once)."""
    d = venv_dir()
    py = d / "bin" / "python"
    done = d / ".complete"
    if not done.exists():
        d.parent.mkdir(parents=True, exist_ok=True)
        with open(d.parent / f"{d.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # several test runs on one machine: one builds, the others wait
            if not done.exists():
                child_venv.create(d)  # before the install: pip sees the parent's torch and leaves it alone
                subprocess.run([str(py), "-m", "pip", "install", "-q", *PINS], check=True)
                done.write_text(" ".join(PINS))
    return py


def run(script: str, *args: str, timeout: int = 600) -> str:
    """Run a Python snippet inside the venv (torch single-threaded: the CI machine has 2 cores)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    p = subprocess.run([str(python()), "-c", script, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"optimum venv step failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return p.stdout


if __name__ == "__main__":
    print(python())


# Runs inside the venv: a random-init tiny model (2 layers, hidden 32) and a word-level tokenizer saved to
# OUT/hf, then optimum's exporter (``optimum-cli export onnx``) on that local folder into OUT/onnx (offline, no hub access).
EXPORT_SCRIPT = r"""
import sys
from pathlib import Path
import torch, transformers as T
from tokenizers import Tokenizer, models, pre_tokenizers
arch, out = sys.argv[1], Path(sys.argv[2])
hidden, layers, heads = (int(x) for x in sys.argv[3:6]) if len(sys.argv) > 5 else (32, 2, 4)
src = out / "hf"
src.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
vocab = {w: i for i, w in enumerate(["<pad>", "</s>", "<unk>"] + [f"w{i}" for i in range(96)])}
tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
fast = T.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
TEXT = dict(vocab_size=99, pad_token_id=0, bos_token_id=1, eos_token_id=1, hidden_size=hidden, num_hidden_layers=layers,
            num_attention_heads=heads, intermediate_size=2 * hidden, max_position_embeddings=64)
ZOO = {  # arch -> (config class, config kwargs, model class, optimum task)
    "bert": ("BertConfig", TEXT, "BertModel", "feature-extraction"),  # takes token_type_ids
    "llama": ("LlamaConfig", dict(TEXT, num_key_value_heads=heads // 2), "LlamaForCausalLM", "text-generation-with-past"),  # GQA
    # learned absolute positions, computed from position_ids that the export takes as an input
    "opt": ("OPTConfig", dict(TEXT, ffn_dim=2 * hidden, word_embed_proj_dim=hidden, init_std=0.3), "OPTForCausalLM", "text-generation-with-past"),
    # windowed attention: 32x32 pixels in 4x4 patches, an 8x8 grid in four 4x4 windows
    "swin": ("SwinConfig", dict(image_size=32, patch_size=4, embed_dim=hidden, depths=[layers], num_heads=[heads], window_size=4),
             "SwinModel", "feature-extraction"),
}
if arch == "marian":
    cfg = T.MarianConfig(vocab_size=99, d_model=hidden, encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
                         decoder_attention_heads=heads, encoder_ffn_dim=2 * hidden, decoder_ffn_dim=2 * hidden, max_position_embeddings=512,
                         pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=None)
    model, task = T.MarianMTModel(cfg), "text2text-generation-with-past"
elif arch == "gpt2":
    cfg = T.GPT2Config(vocab_size=99, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=512, bos_token_id=1, eos_token_id=1, pad_token_id=0)
    model, task = T.GPT2LMHeadModel(cfg), "text-generation-with-past"
elif arch.startswith("vit-"):  # vision->text: a ViT encoder (32x32 images, 8x8 patches: 4x4 grid + CLS)
    # weights drawn 10x wider than the default: a default-init tiny decoder greedily repeats one token, which
    # would make "the same tokens as transformers" a weak check
    enc = T.ViTConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=2 * hidden,
                      image_size=32, patch_size=8, num_channels=3, initializer_range=0.2)
    special = dict(bos_token_id=0, eos_token_id=1, pad_token_id=0, decoder_start_token_id=0)
    if arch == "vit-gpt2":  # the cache holds the decoder's own keys; cross keys are recomputed from the states
        dec = T.GPT2Config(vocab_size=99, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=128, add_cross_attention=True,
                           is_decoder=True, initializer_range=0.2, **special)
    elif arch == "vit-trocr":  # the cache holds both halves: the with-past file takes no encoder states
        dec = T.TrOCRConfig(vocab_size=99, d_model=hidden, decoder_layers=layers, decoder_attention_heads=heads, init_std=0.2,
                            decoder_ffn_dim=2 * hidden, max_position_embeddings=128, cross_attention_hidden_size=hidden, **special)
    else:
        raise SystemExit(f"unknown arch {arch}")
    cfg = T.VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
    for k, v in special.items():
        setattr(cfg, k, v)
    model, task = T.VisionEncoderDecoderModel(cfg), "image-to-text-with-past"
    # ImageNet statistics, not the processor's 0.5 default (attnviz's own default): the folder must say them
    T.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]).save_pretrained(src)
elif arch in ZOO:  # the optimum zoo (bench/optimum_zoo.py): weights drawn wide so that heads really differ
    cfg_cls, kw, model_cls, task = ZOO[arch]
    model = getattr(T, model_cls)(getattr(T, cfg_cls)(**kw, initializer_range=0.3))
    if arch == "swin":
        T.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(src)
else:
    raise SystemExit(f"unknown arch {arch}")
model.save_pretrained(src)
fast.save_pretrained(src)
from optimum.exporters.onnx import main_export  # what ``optimum-cli export onnx`` runs

# validation re-runs both models on random inputs: the tests compare against transformers themselves
main_export(str(src), output=str(out / "onnx"), task=task, do_validation=False)
"""


# Runs inside the venv: a hierarchical Swin (image 64, patches of 4, windows of 4) whose three stages have 16x16,
# 8x8 and 4x4 patch grids: 16 windows, then 4 (shifted blocks), then one window the size of the grid (no shift);
# heads differ per stage.  (A grid smaller than the window fails in transformers itself: its position bias keeps
# the configured window.)  A script of its own: its cache key leaves
# the other exports' keys (and their cached folders) as they are.
SWIN_STAGES_SCRIPT = r"""
import sys
from pathlib import Path
import torch, transformers as T
out = Path(sys.argv[2])
hidden = int(sys.argv[3]) if len(sys.argv) > 3 else 32
src = out / "hf"
src.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
cfg = T.SwinConfig(image_size=64, patch_size=4, embed_dim=hidden // 2, depths=[2, 2, 2], num_heads=[2, 4, 4],
                   window_size=4, initializer_range=0.3)
T.SwinModel(cfg).save_pretrained(src)
T.ViTImageProcessor(size={"height": 64, "width": 64}).save_pretrained(src)
from optimum.exporters.onnx import main_export
main_export(str(src), output=str(out / "onnx"), task="feature-extraction", do_validation=False)
"""

# Runs inside the venv: a tiny random-init Whisper (2 + 2 layers, d_model 32, 4 heads, 80 mel bins) whose feature
# extractor cuts 5 s windows (chunk_length 5: 500 frames, 250 encoder positions after the conv stride, so
# max_source_positions 250 -- consistent with the extractor, as Whisper's 30 s / 3000 / 1500 are), a word-level
# tokenizer carrying Whisper's special tokens, and a generation_config.json that forces the prompt
# <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>, exported with optimum's
# automatic-speech-recognition-with-past task.  Weights drawn wide (init_std 0.7): at Whisper's default 0.02 (and
# still at 0.2) the tiny decoder greedily repeats one token, which would make "the same tokens" a weak check; wider
# still (1.0) the maps amplify the 1e-4 float32 noise of transformers' own STFT past the 5e-4 the tests hold.
# A script of its own: its cache key leaves the others' as they are.
WHISPER_SCRIPT = r"""
import sys
from pathlib import Path
import torch, transformers as T
from tokenizers import Tokenizer, models, pre_tokenizers
out = Path(sys.argv[2])
hidden, layers, heads = (int(x) for x in sys.argv[3:6]) if len(sys.argv) > 5 else (32, 2, 4)
src = out / "hf"
src.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
special = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|translate|>", "<|transcribe|>", "<|notimestamps|>"]
vocab = {w: i for i, w in enumerate([f"w{i}" for i in range(60)] + special)}  # <|endoftext|> = 60 ... <|notimestamps|> = 66
ids = {t: vocab[t] for t in special}
tk = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
eot = "<|endoftext|>"
fast = T.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token=eot, eos_token=eot, pad_token=eot, bos_token=eot,
                                 additional_special_tokens=special[1:])
cfg = T.WhisperConfig(vocab_size=len(vocab), num_mel_bins=80, d_model=hidden, encoder_layers=layers, decoder_layers=layers,
                      encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=2 * hidden,
                      decoder_ffn_dim=2 * hidden, max_source_positions=250, max_target_positions=64, init_std=0.7,
                      pad_token_id=ids[eot], bos_token_id=ids[eot], eos_token_id=ids[eot],
                      decoder_start_token_id=ids["<|startoftranscript|>"], suppress_tokens=[], begin_suppress_tokens=[])
model = T.WhisperForConditionalGeneration(cfg)
model.generation_config = T.GenerationConfig(
    decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids[eot], pad_token_id=ids[eot], bos_token_id=ids[eot],
    forced_decoder_ids=[[1, ids["<|en|>"]], [2, ids["<|transcribe|>"]], [3, ids["<|notimestamps|>"]]],
    lang_to_id={"<|en|>": ids["<|en|>"], "<|de|>": ids["<|de|>"]},
    task_to_id={"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]},
    no_timestamps_token_id=ids["<|notimestamps|>"], is_multilingual=True, suppress_tokens=[], begin_suppress_tokens=[],
    max_length=64)
model.save_pretrained(src)
fast.save_pretrained(src)
T.WhisperFeatureExtractor(feature_size=80, chunk_length=5).save_pretrained(src)
from optimum.exporters.onnx import main_export
main_export(str(src), output=str(out / "onnx"), task="automatic-speech-recognition-with-past", do_validation=False,
            nb_max_frames=500)
"""
# Runs inside the venv: a tiny random-init speech encoder on raw samples (2 layers, hidden 32, 4 heads, a conv stack
# of 16 channels) with its Wav2Vec2FeatureExtractor, exported with optimum (input_values only, as optimum exports
# them).  wav2vec2: a CTC head on wav2vec2-base's conv stack (7 layers, 320 samples = 20 ms a frame, 25 ms seen),
# group norm, no attention mask, and a letter vocabulary (Wav2Vec2CTCTokenizer's vocab.json).  hubert: layer norm
# ("stable", as the large checkpoints), an extractor that returns the attention mask, and a conv stack of its own
# (kernels 10, 8, 4, strides 5, 4, 4: 80 samples = 5 ms a frame, 105 seen), so that frame times are read from the
# config, not assumed.  wavlm: its gated relative position bias, under an audio-classification head.  Weights drawn
# wider than the default 0.02 (0.3) so that heads really differ.  data2vec-audio: an audio-frame-classification head.
# A script of its own: its cache key leaves the others' as they are.
SPEECH_SCRIPT = r"""
import json, sys
from pathlib import Path
import torch, transformers as T
arch, out = sys.argv[1], Path(sys.argv[2])
hidden, layers, heads = (int(x) for x in sys.argv[3:6]) if len(sys.argv) > 5 else (32, 2, 4)
src = out / "hf"
src.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
common = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=2 * hidden,
              num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, initializer_range=0.3, layerdrop=0.0)
letters = ["<pad>", "<s>", "</s>", "<unk>", "|"] + list("ETAOINSHRDLU")
if arch == "wav2vec2":
    cfg = T.Wav2Vec2Config(conv_dim=(16,) * 7, vocab_size=len(letters), pad_token_id=0, **common)
    model, task, mask = T.Wav2Vec2ForCTC(cfg), "automatic-speech-recognition", False
    (src / "vocab.json").write_text(json.dumps({w: i for i, w in enumerate(letters)}))
    T.Wav2Vec2CTCTokenizer(str(src / "vocab.json")).save_pretrained(src)
elif arch == "hubert":
    cfg = T.HubertConfig(conv_dim=(16, 16, 16), conv_kernel=(10, 8, 4), conv_stride=(5, 4, 4), feat_extract_norm="layer",
                         do_stable_layer_norm=True, **common)
    model, task, mask = T.HubertModel(cfg), "feature-extraction", True
elif arch == "wavlm":
    cfg = T.WavLMConfig(conv_dim=(16,) * 7, num_buckets=32, max_bucket_distance=100, num_labels=3, **common)
    model, task, mask = T.WavLMForSequenceClassification(cfg), "audio-classification", False
elif arch == "data2vec-audio":  # its positional convs are layers of their own (num_conv_pos_embeddings of them)
    kw = dict(common, num_conv_pos_embeddings=2, conv_pos_kernel_size=5)
    cfg = T.Data2VecAudioConfig(conv_dim=(16,) * 7, num_labels=3, **kw)
    model, task, mask = T.Data2VecAudioForAudioFrameClassification(cfg), "audio-frame-classification", False
else:
    raise SystemExit(f"unknown arch {arch}")
model.save_pretrained(src)
T.Wav2Vec2FeatureExtractor(return_attention_mask=mask, do_normalize=True).save_pretrained(src)
from optimum.exporters.onnx import main_export
main_export(str(src), output=str(out / "onnx"), task=task, do_validation=False)
if mask:  # optimum exports input_values alone: the mask input comes from torch.onnx (onnx_mask/, the same weights)
    import shutil
    masked = out / "onnx_mask"
    masked.mkdir()
    for name in ("config.json", "preprocessor_config.json"):
        shutil.copy(out / "onnx" / name, masked / name)
    eager = type(model).from_pretrained(src, attn_implementation="eager").eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = eager

        def forward(self, input_values, attention_mask):
            return self.m(input_values=input_values, attention_mask=attention_mask).last_hidden_state

    x = torch.randn(2, 8000)
    m = torch.ones(2, 8000, dtype=torch.long)
    m[1, 5000:] = 0
    axes = {"input_values": {0: "batch", 1: "samples"}, "attention_mask": {0: "batch", 1: "samples"}}
    torch.onnx.export(Encoder(), (x, m), str(masked / "model.onnx"), input_names=["input_values", "attention_mask"],
                      output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)
"""
# Runs inside the venv: a Swinv2 (cosine attention, a continuous position bias) of two stages, image 32 in 4x4
# patches with 4x4 windows: an 8x8 grid in four windows (block 1 shifted by 2), then a 4x4 grid in one window.
# A script of its own (session 22): its cache key leaves the other exports' as they are.
SWINV2_SCRIPT = r"""
import sys
from pathlib import Path
import torch, transformers as T
out = Path(sys.argv[2])
hidden = int(sys.argv[3]) if len(sys.argv) > 3 else 32
src = out / "hf"
src.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
cfg = T.Swinv2Config(image_size=32, patch_size=4, embed_dim=hidden // 2, depths=[2, 1], num_heads=[2, 4], window_size=4,
                     initializer_range=0.3)
T.Swinv2Model(cfg).save_pretrained(src)
T.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(src)
from optimum.exporters.onnx import main_export
main_export(str(src), output=str(out / "onnx"), task="feature-extraction", do_validation=False)
"""
SCRIPTS = {
    "swinv2": SWINV2_SCRIPT,
    "swin-stages": SWIN_STAGES_SCRIPT,
    "whisper": WHISPER_SCRIPT,
    "wav2vec2": SPEECH_SCRIPT,
    "hubert": SPEECH_SCRIPT,
    "wavlm": SPEECH_SCRIPT,
    "data2vec-audio": SPEECH_SCRIPT,
}  # arch -> its own export script; every other arch: EXPORT_SCRIPT


def export(arch: str, out: Path, size: tuple[int, int, int] = (32, 2, 4)) -> Path:
    """Export a random-init ``arch`` (marian | gpt2 | vit-gpt2 | vit-trocr | bert | llama | opt | swin | swin-stages | swinv2 | whisper | wav2vec2 | hubert | wavlm | data2vec-audio) of (hidden, layers, heads) with optimum; returns OUT (hf/ and onnx/ inside)."""
    run(SCRIPTS.get(arch, EXPORT_SCRIPT), arch, str(out), *map(str, size))
    return out


def cached_export(arch: str, size: tuple[int, int, int] = (32, 2, 4)) -> Path:
    """:func:`export` once per machine: seeded, so the same script and pins give the same files (tests only read them)."""
    script = SCRIPTS.get(arch, EXPORT_SCRIPT)
    key = hashlib.sha1((script + " ".join(PINS) + sys.version + arch + repr(size)).encode()).hexdigest()[:10]
    out = CACHE / f"export-{arch}-{key}"
    done = out / ".complete"
    if not done.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with open(CACHE / f"export-{arch}-{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                shutil.rmtree(out, ignore_errors=True)  # a half-written export from an interrupted run
                export(arch, out, size)
                done.write_text(arch)
    return out
