"""The shapes of the `tiny://<size>` models the trainer builds itself (trainer.models.tiny builds them):
plain data, so validation, memory-fit and the CLI read them without torch."""

from __future__ import annotations

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Shapes per size. "tiny": a GRPO step of 8 prompts x 8 samples x ~16 tokens well under 1 s on 2 cores.
SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
    },
    # "tiny" with head_dim 32, the least vLLM's CPU attention backend accepts (16 fails at the first generate)
    "tiny32": {
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 512,
    },
    "small": {
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "max_position_embeddings": 2048,
    },
    # benchmark sizes (bench/rollout.py): about 20M and 100M parameters, head_dim 64
    "m20": {
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 6,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "max_position_embeddings": 2048,
    },
    "m100": {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "max_position_embeddings": 2048,
    },
}
