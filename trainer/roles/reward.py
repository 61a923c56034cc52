"""reward: scores responses with the reward functions named in the config's `rewards` section.

The `rewards` section maps a domain name to a reward worker config; each sample goes to the
reward whose `tag_included` lists the sample's `tag` (an empty list takes every sample).
Without a `rewards` section a synthetic-task run is scored by the `synthetic` verifier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from trainer.cluster.worker_group import dispatch
from trainer.config.registries import REWARD_TYPES, ROLL_REWARD_WORKERS
from trainer.roles.common import RoleBase

if TYPE_CHECKING:
    from trainer.cluster.worker_group import Group
    from trainer.config.schema import PipelineConfig, RewardWorkerConfig, WorkerConfig
    from trainer.rollout.base import SamplingParams

class JudgeServer(Protocol):
    """The reward_model group's role (trainer.roles.judge_server.JudgeServerWorker; every role's Role methods
    besides), declared beside its only caller, cluster_judge."""

    @dispatch("sharded")
    def judge(self, batch: dict[str, Any], params: SamplingParams) -> list[str]: ...


# The llm_judge settings the reward section owns (ROLL's keys), never taken from reward_kwargs.
JUDGE_SECTION_KEYS = ("judge_prompt", "judge_model_type", "judge_model_name", "judge_api_url", "judge_api_key",
                      "generate")


class RewardWorker(RoleBase):
    """`judge_server`: the reward_model group (trainer.roles.judge_server), which judge_model_type cluster asks."""

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int,
                 judge_server: Group[JudgeServer] | None = None) -> None:
        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        self.reward_fn = build_reward_fn(cfg, judge_server)

    def score(self, batch: dict[str, Any]) -> list[float]:
        return self.reward_fn(list(batch["prompts"]), list(batch["responses"]), list(batch["samples"]))


def reward_type(name: str, section: Any) -> str:
    if section.reward_type:
        return section.reward_type
    if section.worker_cls in ROLL_REWARD_WORKERS:
        return ROLL_REWARD_WORKERS[section.worker_cls]
    raise ValueError(f"rewards.{name}.reward_type: not set (and no known worker_cls); "
                     f"valid: {', '.join(REWARD_TYPES)}")


def build_reward_fn(cfg: PipelineConfig, judge_server: Group[JudgeServer] | None = None) -> Any:
    """(prompts, responses, samples) -> list[float], dispatching each sample by its tag; `judge_server` is the
    reward_model group a judge_model_type cluster judge sends its prompts to."""
    from trainer.rewards.registry import build_reward

    routes: list[tuple[str, list[str], Any]] = []
    for name, section in cfg.rewards.items():
        kwargs = dict(section.reward_kwargs)
        if reward_type(name, section) == "reward_model":
            kwargs.setdefault("model_name_or_path", section.model_args.model_name_or_path or cfg.reward_pretrain)
            kwargs.setdefault("adapter_name_or_path", section.model_args.adapter_name_or_path)
        if reward_type(name, section) == "code_sandbox":
            kwargs.update(use_local=section.use_local, code_url=section.code_url)
        if reward_type(name, section) == "llm_judge":
            kwargs.update(judge_options(cfg, name, section, judge_server))
        if reward_type(name, section) == "crossthinkqa_rule" and section.scoring_mode is not None:
            kwargs["scoring_mode"] = section.scoring_mode  # ROLL's reward_type soft/loose/strict
        try:
            fn = build_reward(reward_type(name, section), **kwargs)
        except ValueError as exc:
            raise ValueError(f"rewards.{name}.{exc}") from None
        routes.append((name, list(section.tag_included), fn))
    if not routes:
        data_args = cfg.actor_train.data_args
        if data_args is None or data_args.synthetic is None:
            raise ValueError("rewards: no reward configured; add e.g. "
                             "`rewards: {math_rule: {reward_type: math_rule}}`")
        routes.append(("synthetic", [], build_reward("synthetic")))

    def score(prompts: list[str], responses: list[str], samples: list[dict]) -> list[float]:
        out: list[float | None] = [None] * len(samples)
        for _name, tags, fn in routes:
            idx = [i for i, s in enumerate(samples) if out[i] is None and (not tags or s.get("tag") in tags)]
            if idx:
                scores = fn([prompts[i] for i in idx], [responses[i] for i in idx], [samples[i] for i in idx])
                for i, value in zip(idx, scores, strict=True):
                    out[i] = float(value)
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            tag = samples[missing[0]].get("tag")
            raise ValueError(f"rewards: no reward takes samples with tag {tag!r} (tag_included of "
                             f"{', '.join(n for n, _, _ in routes)})")
        return [float(v) for v in out]  # type: ignore[arg-type]

    return score


def judge_options(cfg: PipelineConfig, name: str, section: RewardWorkerConfig,
                  judge_server: Group[JudgeServer] | None = None) -> dict[str, Any]:
    """The llm_judge reward's section-owned options (trainer.rewards.llm_judge.LLMJudgeOptions): ROLL's judge_*
    keys, and a generator: for judge_model_type inference over the section's own model, for cluster through the
    reward_model group."""
    owned = sorted(set(section.reward_kwargs) & set(JUDGE_SECTION_KEYS))
    if owned:
        raise ValueError(f"rewards.{name}.reward_kwargs.{owned[0]}: set by the reward section, not reward_kwargs "
                         f"(rewards.{name}.{owned[0]})")
    options: dict[str, Any] = {
        "judge_prompt": section.judge_prompt, "judge_model_type": section.judge_model_type,
        "judge_model_name": section.judge_model_name, "judge_api_url": section.judge_api_url,
        "judge_api_key": section.judge_api_key,
    }
    if section.judge_model_type == "inference":
        options["generate"] = local_judge(cfg, name, section)
    if section.judge_model_type == "cluster":
        options["generate"] = cluster_judge(cfg, name, section, judge_server)
    return options


def cluster_judge(cfg: PipelineConfig, name: str, section: RewardWorkerConfig,
                  server: Group[JudgeServer] | None) -> Any:
    """conversations -> replies from the reward_model group (ROLL's judge_model_type cluster): the conversations
    split evenly over its ranks (padded with empty ones, which a rank skips), decoded with this section's
    generating_args as ROLL sends them with each request, else the reward_model's own."""
    if server is None or cfg.reward_model is None:
        raise ValueError(f"rewards.{name}.judge_model_type: cluster asks the reward_model group, which this run did "
                         "not build (a top-level reward_model section)")
    params = judge_sampling_params(cfg, section if section.generating_args is not None else cfg.reward_model)

    def generate(conversations: list[list[dict[str, str]]]) -> list[str]:
        if not conversations:
            return []
        padded = conversations + [[]] * (-len(conversations) % server.world_size)
        shards = server.call_sharded(JudgeServer.judge, {"conversations": padded}, params=params)
        return [reply for shard in shards for reply in shard][: len(conversations)]

    return generate


def local_judge(cfg: PipelineConfig, name: str, section: RewardWorkerConfig) -> Any:
    """conversations -> the section model's replies (ROLL's `inference` judge) on the section's engine
    (judge_engine): judge_generate over it."""
    return judge_generate(cfg, section, judge_engine(cfg, name, section))


def judge_engine(cfg: PipelineConfig, name: str, section: RewardWorkerConfig) -> Any:
    """The inference judge's engine (judge_engine_at the reward section `rewards.<name>`)."""
    return judge_engine_at(cfg, f"rewards.{name}", section)


def judge_engine_at(cfg: PipelineConfig, where: str, section: WorkerConfig) -> Any:
    """A judge's engine from the section at config path `where` (an inference judge's reward section, or the
    reward_model group's), by its strategy_name: hf_infer over the section's model, or an in-process vLLM engine
    from its strategy_config (ROLL's `strategy_name: vllm` under a judge; seed: the pipeline seed; it never sleeps,
    being no rollout engine the trainer swaps with)."""
    from trainer.config import topology
    from trainer.models.loading import load_model
    from trainer.roles.rollout import hf_engine_of

    path = section.model_args.model_name_or_path or cfg.reward_pretrain
    if not path:
        raise ValueError(f"{where}.model_args.model_name_or_path: the judge needs its model's path (or a top-level "
                         "reward_pretrain)")
    args = section.model_args
    strategy = topology.strategy_name(where, section)
    if strategy == "vllm":
        import torch

        from trainer.rollout.vllm import VllmEngine, engine_dtype, engine_kwargs

        options = topology.strategy_config(section)
        kwargs = engine_kwargs(options.model_dump(), dtype=engine_dtype(str(path), args.dtype), seed=cfg.seed,
                               on_gpu=torch.cuda.is_available(), colocated=False,
                               trust_remote_code=args.trust_remote_code, hf_overrides=args.model_config_kwargs)
        return VllmEngine(str(path), kwargs)
    if strategy != "hf_infer":
        raise ValueError(f"{where}.strategy_args.strategy_name: a judge runs on hf_infer or vllm, not {strategy}")
    model = load_model(path, dtype=args.dtype, attn_implementation=args.attn_implementation,
                       trust_remote_code=args.trust_remote_code, config_overrides=args.model_config_kwargs)
    return hf_engine_of(section, str(path), model)


def judge_generate(cfg: PipelineConfig, section: RewardWorkerConfig, engine: Any) -> Any:
    """conversations -> replies through `engine` (judge_replies), generated with the section's generating_args."""
    replies = judge_replies(cfg, section, engine)
    params = judge_sampling_params(cfg, section)
    return lambda conversations: replies(conversations, params)


def judge_replies(cfg: PipelineConfig, section: WorkerConfig, engine: Any) -> Any:
    """(conversations, SamplingParams) -> replies through `engine`: each conversation rendered with the section's
    data_args.template (the tokenizer's chat template by default), decoded without special tokens."""
    from trainer.data.datasets import render_prompt
    from trainer.models.loading import load_tokenizer

    path = str(section.model_args.model_name_or_path or cfg.reward_pretrain)  # judge_engine refused an unset one
    tokenizer = load_tokenizer(path, trust_remote_code=section.model_args.trust_remote_code)
    template = section.data_args.template if section.data_args is not None else "native"

    def replies(conversations: list[list[dict[str, str]]], params: SamplingParams) -> list[str]:
        if not conversations:
            return []
        texts = [render_prompt({"messages": m}, tokenizer, template=template, messages_key="messages")
                 for m in conversations]
        ids = [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]
        gens = engine.generate(ids, params)
        return [tokenizer.decode(g.token_ids, skip_special_tokens=True).strip() for g in gens]

    return replies


def judge_sampling_params(cfg: PipelineConfig, section: WorkerConfig) -> SamplingParams:
    """The judge's decoding from the section's generating_args (greedy without them or with do_sample false);
    max_new_tokens unset uses response_length, the seed generating_args.seed else the pipeline seed."""
    from trainer.rollout.base import SamplingParams

    args = section.generating_args
    max_new = (args.max_new_tokens if args is not None else None) or cfg.response_length
    seed = cfg.seed if args is None or args.seed is None else args.seed
    if args is None:
        return SamplingParams(max_new_tokens=max_new, temperature=0.0, seed=seed)
    knobs: dict[str, Any] = {"stop_token_ids": list(args.stop_token_ids or []),
                             "stop_strings": list(args.stop_strings or []), "min_new_tokens": args.min_new_tokens or 0,
                             "repetition_penalty": args.repetition_penalty, "ignore_eos": args.ignore_eos}
    if not args.do_sample:
        return SamplingParams(max_new_tokens=max_new, temperature=0.0, seed=seed, **knobs)
    return SamplingParams(max_new_tokens=max_new, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                          min_p=args.min_p, seed=seed, **knobs)
