"""Generation engines behind one vLLM-shaped interface: ``hf_infer`` and ``vllm`` (sglang later)."""

from trainer.rollout.base import STOP_REASONS, Generation, RolloutEngine, SamplingParams

__all__ = ["ROLLOUT_ENGINES", "STOP_REASONS", "Generation", "RolloutEngine", "SamplingParams"]

# strategy name -> "module:Class"; imported lazily so that `import trainer.rollout` stays light
ROLLOUT_ENGINES = {"hf_infer": "trainer.rollout.hf:HFInferEngine", "vllm": "trainer.rollout.vllm:VllmEngine"}
