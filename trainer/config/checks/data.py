"""Lengths, data sources and domain interleaving."""

from __future__ import annotations

from trainer.config.checks.common import error, warning
from trainer.config.issues import ConfigIssue
from trainer.config.schema import DatasetFilter, PipelineConfig, SglangConfig, VllmConfig
from trainer.config.topology import domain_batch_sizes, lengths, roles, rollout_schedule, strategy_config


def check_lengths(config: PipelineConfig) -> list[ConfigIssue]:
    """sequence_length holds prompt_length + response_length, unless it caps an agentic trajectory (ROLL's cap:
    topology.lengths), and an engine holds the longest row; a turn never samples more than a row's response."""
    issues = []
    bounds = lengths(config)
    total = bounds.total
    if bounds.trajectory_cap is None and config.sequence_length is not None and config.sequence_length < total:
        issues.append(
            error(
                "sequence_length",
                f"{config.sequence_length} is shorter than prompt_length + response_length = "
                f"{config.prompt_length} + {config.response_length} = {total}; override sequence_length={total}",
            )
        )
    for role in ("actor_infer", "validation"):
        worker = getattr(config, role)
        if worker is None:
            continue
        cfg = strategy_config(worker)
        base = f"{role}.strategy_args.strategy_config"
        limit_field, limit = None, None
        if isinstance(cfg, VllmConfig):
            limit_field, limit = "max_model_len", cfg.max_model_len
        elif isinstance(cfg, SglangConfig):
            limit_field, limit = "context_length", cfg.context_length
        held = (f"sequence_length = {total}, which caps a trajectory" if bounds.trajectory_cap is not None else
                f"prompt_length + response_length = {config.prompt_length} + {config.response_length} = {total}")
        single_turn = bounds.trajectory_cap is None and config.train_env_manager is None
        if limit is not None and limit < total and isinstance(cfg, VllmConfig) and single_turn \
                and limit > config.prompt_length:
            # vLLM rejects only a prompt of max_model_len tokens or more; a longer generation stops there
            # (finish reason length), which is how ROLL's own files run with a max_model_len below the sum
            issues.append(
                warning(
                    f"{base}.{limit_field}",
                    f"{limit} is shorter than {held}: vLLM ends a response when prompt + response reach {limit} "
                    f"(finish reason length), so a {config.prompt_length}-token prompt gets at most "
                    f"{limit - config.prompt_length} response tokens; {base}.{limit_field}={total} lets every "
                    f"response reach response_length",
                )
            )
        elif limit is not None and limit < total:
            issues.append(
                error(
                    f"{base}.{limit_field}",
                    f"{limit} is shorter than {held}; raise it to at least {total}; override {base}.{limit_field}={total}",
                )
            )
        gen = worker.generating_args
        too_long = gen is not None and (gen.max_new_tokens or 0) > bounds.response
        if role == "actor_infer" and too_long:
            cap = (f"sequence_length - 1 = {bounds.response}, the most a reply can take after a one-token prompt"
                   if bounds.trajectory_cap is not None else f"response_length {bounds.response}; use at most "
                   "response_length (e.g. ${response_length})")
            issues.append(
                error(
                    f"{role}.generating_args.max_new_tokens",
                    f"{gen.max_new_tokens} exceeds {cap}; override "
                    f"{role}.generating_args.max_new_tokens={bounds.response}",
                )
            )
    return issues


def check_data(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for role, worker in roles(config).items():
        data = worker.data_args
        if data is None:
            continue
        if data.prompt is not None and data.messages is not None:
            issues.append(error(f"{role}.data_args.messages", "cannot be used together with prompt; keep one"))
        if data.file_name is not None and data.synthetic is not None:
            issues.append(error(f"{role}.data_args.synthetic", "cannot be used together with file_name; keep one"))
    agentic = config.train_env_manager is not None
    data = config.actor_train.data_args
    if not agentic and (data is None or (data.file_name is None and data.synthetic is None)):
        issues.append(
            error(
                "actor_train.data_args",
                "training prompts are missing: set data_args.file_name (a data file) or data_args.synthetic "
                "(a built-in task)",
            )
        )
    return issues


DOMAINS_PATH = "actor_train.data_args.domain_interleave_probs"


def check_domains(config: PipelineConfig) -> list[ConfigIssue]:
    """domain_interleave_probs and dataset_filter act on actor_train's prompts in the RLVR pipeline
    (trainer.data.sampler.DomainInterleavedSampler, trainer.data.datasets.filter_rows). Whether each listed
    domain has prompts is checked when the data is loaded, before any worker starts."""
    issues = []
    agentic = config.train_env_manager is not None
    if agentic and config.dataset_filter.model_dump() != DatasetFilter().model_dump():
        issues.append(warning("dataset_filter", "has no effect in the agentic pipeline (episodes come from "
                              "environments, not data rows)"))
    for role, worker in roles(config).items():
        if role != "actor_train" and worker.data_args is not None and worker.data_args.domain_interleave_probs:
            issues.append(warning(f"{role}.data_args.domain_interleave_probs", "has no effect: only "
                                  "actor_train.data_args.domain_interleave_probs splits the training batches"))
    data = config.actor_train.data_args
    probs = data.domain_interleave_probs if data is not None else None
    if not probs:
        return issues
    if agentic:
        return [*issues, warning(DOMAINS_PATH, "has no effect in the agentic pipeline (RLVR only)")]
    size = config.rollout_batch_size
    shares = domain_batch_sizes(probs, size)
    split = ", ".join(f"{d} {n}" for d, n in shares.items())
    rule = ("ROLL's rounding gives every domain but the last listed int(p x rollout_batch_size) prompts and the "
            "last the rest")
    empty = [d for d, n in shares.items() if n < 1]
    if empty:
        enough = next((b for b in range(size + 1, 100 * size + 100)
                       if all(n >= 1 for n in domain_batch_sizes(probs, b).values())), None)
        fix = f"raise rollout_batch_size to at least {enough}" if enough else "raise rollout_batch_size"
        issues.append(error(DOMAINS_PATH, f"{', '.join(empty)} would get no prompt in a batch of rollout_batch_size "
                            f"{size} ({split}; {rule}): {fix}, or raise their probability"))
    elif any(abs(n - probs[d] * size) > 1e-9 for d, n in shares.items()):
        issues.append(warning(DOMAINS_PATH, f"a batch of {size} prompts splits as {split}, not exactly in these "
                              f"proportions: {rule}"))
    refills = any(r.query_filter_config is not None and r.query_filter_config.type != "no_filter"
                  for r in config.rewards.values())
    if (config.is_use_additional_prompts and refills and not rollout_schedule(config).overlaps
            and config.max_additional_running_prompts > 0):
        issues.append(error("is_use_additional_prompts", f"replacement prompts are not drawn per domain here (ROLL "
                            f"refills each domain's share from that domain): with {DOMAINS_PATH} they would "
                            "shift a batch's proportions; set is_use_additional_prompts: false (filtered groups "
                            "then just leave the loss)"))
    batch_level = [name for name in ("norm_mean_type", "norm_std_type")
                   if getattr(config, name) in ("batch", "running")]
    batch_level += ["whiten_advantages"] * config.whiten_advantages
    if len(probs) > 1 and batch_level:
        issues.append(warning(DOMAINS_PATH, f"ROLL normalises each domain's rewards and advantages apart (batch "
                              f"and running statistics per domain); here the whole batch is normalised together "
                              f"({', '.join(batch_level)})"))
    return issues
