"""Build a tiny, randomly initialised Qwen2-architecture model and its tokenizer, locally.

Nothing is downloaded: the tokenizer is a byte-level BPE with no merges (every byte is one token),
built exactly like Qwen2's (same pre-tokenizer regex, NFC normaliser, byte-level decoder), so
`AutoTokenizer` — which in transformers 5.x always builds `Qwen2Tokenizer` for `model_type=qwen2` —
reads it back unchanged and spaces/newlines survive a round trip.

Vocabulary: 256 byte tokens + <|endoftext|>, <|im_start|>, <|im_end|> = 259 = `config.vocab_size`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.config.tiny_shapes import SIZES, SPECIAL_TOKENS

EOS_TOKEN = "<|im_end|>"

# Qwen-style ChatML; `add_generation_prompt` opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)



def bytes_to_unicode() -> dict[int, str]:
    """GPT-2/Qwen byte -> printable unicode char map (the byte-level BPE alphabet, 256 entries)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in codes), strict=True))


def build_tokenizer() -> Any:
    """Byte-level BPE tokenizer like Qwen2's, with ChatML special tokens and chat template."""
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    vocab = {ch: i for i, ch in enumerate(sorted(bytes_to_unicode().values()))}
    for token in SPECIAL_TOKENS:
        vocab[token] = len(vocab)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=[],
        unk_token=None,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=list(SPECIAL_TOKENS),
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.model_max_length = 32768
    return tokenizer


def build_tiny_model(out_dir: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write a randomly initialised Qwen2ForCausalLM (+ tokenizer) to `out_dir` in HF format."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if size not in SIZES:
        raise ValueError(f"size: unknown model size {size!r}; valid: {', '.join(SIZES)}")
    out = Path(out_dir)
    tokenizer = build_tokenizer()
    vocab_size = len(tokenizer)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    config = Qwen2Config(
        vocab_size=vocab_size,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        **SIZES[size],
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=eos_id)
    out.mkdir(parents=True, exist_ok=True)
    save_model_files(model, out)
    tokenizer.save_pretrained(out)
    return out


def save_model_files(model: Any, out: Path) -> None:
    """Write what `model.save_pretrained(out)` writes for this small, unwrapped model: config.json,
    generation_config.json and one model.safetensors without the tied lm_head (a test compares the files).

    Not through save_pretrained: its first act is `unwrap_model`, which, where accelerate is installed
    (a GPU node, the benchmark peers), asks accelerate, and accelerate imports DeepSpeed to check for its
    engine wrapper. So `make-tiny-model` imported DeepSpeed and printed its "Setting accelerator to CPU"
    warning, for a model nothing had wrapped."""
    from safetensors.torch import save_file

    model.config.dtype = str(model.dtype).split(".")[1]
    model.config.architectures = [type(model).__name__]
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    tensors: dict[str, Any] = {}
    stored: set[int] = set()
    for name, tensor in model.state_dict().items():  # the input embedding comes before the tied lm_head
        if tensor.data_ptr() in stored:
            continue
        stored.add(tensor.data_ptr())
        tensors[name] = tensor.contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
