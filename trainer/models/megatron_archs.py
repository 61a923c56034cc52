"""The Hugging Face model_types megatron_train / megatron_infer convert (trainer.models.megatron_convert), in a
torch-free module: preflight names an unsupported model_type before any worker starts."""

MEGATRON_MODEL_TYPES = ("qwen2", "qwen3", "qwen3_moe", "llama")
