"""reward_model: ROLL's shared LLM judge, a worker group of its own that the llm_judge rewards with
judge_model_type cluster send their judge prompts to (ROLL: an InferWorker cluster behind a RouterManager).

Each rank holds one judge engine built from the top-level `reward_model` section by the same code as an inference
judge's (trainer.roles.reward: judge_engine_at, judge_replies): its model, its data_args.template, its strategy
(hf_infer or vllm with its strategy_config). The client's SamplingParams travel with each call, as ROLL sends the
judge worker's generating_args with each request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.roles.common import RoleBase, role_section
from trainer.roles.reward import judge_engine_at, judge_replies

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig
    from trainer.rollout.base import SamplingParams


class JudgeServerWorker(RoleBase):
    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        section = role_section(cfg, role)
        self.engine = judge_engine_at(cfg, role, section)
        self.replies = judge_replies(cfg, section, self.engine)

    def judge(self, batch: dict[str, Any], params: SamplingParams) -> list[str]:
        """The judge's reply to each conversation of this rank's shard; an empty one (the client's padding)
        gets an empty reply without being generated."""
        conversations = list(batch["conversations"])
        answered = iter(self.replies([c for c in conversations if c], params))
        return [next(answered) if c else "" for c in conversations]

    def shutdown(self) -> None:
        """Release the engine's resources (vLLM's processes; hf_infer has none beyond its model)."""
        self.engine.shutdown()
