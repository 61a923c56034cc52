"""The tiny Qwen2 model and its byte-level tokenizer: built locally, loadable through the Auto classes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.cli import main as trainer_main
from trainer.models.loading import load_model, load_tokenizer, resolve_dtype
from trainer.models.tiny import SIZES, build_tiny_model

TEXT = "two  spaces, a\ttab\nnew line\n\n  indented: é 中文 🙂 <tag> 42+7=49 \n"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), size="tiny", seed=0)


def test_auto_classes_load_the_saved_directory(tiny_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    assert model.config.model_type == "qwen2"
    assert model.config.tie_word_embeddings
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert len(tokenizer) == model.config.vocab_size == 259
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"


def test_text_with_spaces_and_newlines_round_trips(tiny_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    assert tokenizer.decode(ids) == TEXT
    assert len(ids) == len(TEXT.encode("utf-8"))  # no merges: one token per byte
    assert max(ids) < 256


def test_special_tokens_eos_pad_and_chat_template(tiny_dir: Path) -> None:
    tokenizer = load_tokenizer(tiny_dir)
    assert tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"
    for token in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert tokenizer.encode(token, add_special_tokens=False) == [tokenizer.convert_tokens_to_ids(token)]
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi\nthere"}], add_generation_prompt=True,
                                         tokenize=False)
    assert text == "<|im_start|>user\nhi\nthere<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert tokenizer.decode(ids) == text


def test_load_tokenizer_sets_padding_side(tiny_dir: Path) -> None:
    assert load_tokenizer(tiny_dir).padding_side == "left"
    right = load_tokenizer(tiny_dir, padding_side="right")
    batch = right(["a", "abc"], padding=True)["attention_mask"]
    assert batch[0] == [1, 0, 0]
    with pytest.raises(ValueError, match=r"padding_side"):
        load_tokenizer(tiny_dir, padding_side="middle")


def test_seed_decides_the_weights_and_generation_runs(tiny_dir: Path, tmp_path: Path) -> None:
    same = load_model(build_tiny_model(tmp_path / "same", seed=0))
    other = load_model(build_tiny_model(tmp_path / "other", seed=1))
    model = load_model(tiny_dir, dtype="float32")
    key = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(model.state_dict()[key], same.state_dict()[key])
    assert not torch.equal(model.state_dict()[key], other.state_dict()[key])
    tokenizer = load_tokenizer(tiny_dir)
    enc = tokenizer(["copy abc\n", "x"], return_tensors="pt", padding=True)
    out = model.generate(**enc, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[0] == 2
    assert enc["input_ids"].shape[1] < out.shape[1] <= enc["input_ids"].shape[1] + 4


def test_dtype_and_size_errors(tmp_path: Path) -> None:
    assert resolve_dtype("bf16") is torch.bfloat16
    assert resolve_dtype("auto") is None
    with pytest.raises(ValueError, match=r"dtype: unknown 'float8'"):
        resolve_dtype("float8")
    with pytest.raises(ValueError, match=r"size: unknown model size 'huge'; valid: tiny, tiny32, small, m20, m100"):
        build_tiny_model(tmp_path, size="huge")


def test_make_tiny_model_command(tmp_path: Path) -> None:
    assert trainer_main(["make-tiny-model", str(tmp_path / "m"), "--size", "small", "--seed", "2"]) == 0
    config = AutoModelForCausalLM.from_pretrained(tmp_path / "m").config
    assert config.hidden_size == SIZES["small"]["hidden_size"]
    assert config.num_hidden_layers == SIZES["small"]["num_hidden_layers"]


def test_the_files_written_are_the_ones_save_pretrained_writes(tmp_path: Path, monkeypatch) -> None:
    import trainer.models.tiny as tiny

    ours = build_tiny_model(tmp_path / "ours", size="small", seed=3)
    monkeypatch.setattr(tiny, "save_model_files", lambda model, out: model.save_pretrained(out))
    reference = build_tiny_model(tmp_path / "reference", size="small", seed=3)
    names = sorted(p.name for p in reference.iterdir())
    assert names == sorted(p.name for p in ours.iterdir())
    assert "model.safetensors" in names and "config.json" in names
    for name in names:
        assert (ours / name).read_bytes() == (reference / name).read_bytes(), name


def test_make_tiny_model_does_not_go_through_transformers_unwrap_model(tmp_path: Path, monkeypatch) -> None:
    """save_pretrained's unwrap_model asks accelerate (where installed), which imports DeepSpeed and logs
    DeepSpeed's accelerator warning: make-tiny-model must not take that road (the stand-in records it)."""
    import transformers.modeling_utils as modeling_utils

    unwrapped = []
    monkeypatch.setattr(modeling_utils, "unwrap_model", lambda model, *a, **k: unwrapped.append(model) or model)
    assert trainer_main(["make-tiny-model", str(tmp_path / "m")]) == 0
    assert unwrapped == []
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "m").config.tie_word_embeddings


def test_make_tiny_model_imports_no_deepspeed_and_prints_no_warning(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import runpy, sys\n"
            f"sys.argv = ['trainer', 'make-tiny-model', {str(tmp_path / 'm')!r}]\n"
            "try:\n    runpy.run_module('trainer', run_name='__main__')\nexcept SystemExit as e:\n    assert not e.code\n"
            "print('deepspeed loaded:', 'deepspeed' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "deepspeed loaded: False" in done.stdout
    assert "accelerator" not in done.stderr.lower() and "WARNING" not in done.stderr, done.stderr[-2000:]
