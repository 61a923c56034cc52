"""Generation of a role (generating_args) and the pipeline's rollout knobs: batch sizes and lengths, the
scheduling of generation requests, asynchronous rollout (docs/decisions/0017)."""

from __future__ import annotations

from typing import Literal

from trainer.config.sections.base import SEED_MAX, Section, fld, import_only


class GeneratingArgs(Section):
    max_new_tokens: int | None = fld(
        None, category="Generation", ge=1,
        description="Most tokens sampled per response; unset uses response_length.",
    )
    max_length: int | None = fld(
        None, category="Generation", inactive=import_only("max_new_tokens (or response_length) bounds each response"), ge=1,
        description="Cap on prompt plus response tokens; max_new_tokens wins when both are set.",
    )
    min_new_tokens: int | None = fld(None, category="Generation", ge=0, description="Fewest tokens sampled per response.")
    temperature: float = fld(
        1.0, category="Generation", ge=0, common=True, description="Softmax temperature; 0 means greedy decoding."
    )
    top_p: float = fld(1.0, category="Generation", gt=0, le=1, description="Nucleus sampling mass (1 disables it).")
    top_k: int = fld(-1, category="Generation", ge=-1, description="Keep only the k most likely tokens (-1 or 0 disables it).")
    min_p: float = fld(
        0.0, category="Generation", ge=0, le=1,
        description="Drop tokens whose probability is below min_p times the top token's (0 disables it).",
    )
    num_beams: int = fld(1, category="Generation", inactive=import_only("RL sampling does not use beam search"), ge=1, description="Beam search width; 1 samples without beams.")
    num_return_sequences: int = fld(
        1, category="Generation", inactive=import_only("training samples num_return_sequences_in_group and evaluation val_n_sample responses per prompt"), ge=1,
        description="Responses per prompt of one request; training rollouts use num_return_sequences_in_group "
        "and evaluation uses val_n_sample instead.",
    )
    repetition_penalty: float = fld(1.0, category="Generation", gt=0, description="Penalty on repeated tokens (1 = none).")
    length_penalty: float = fld(1.0, category="Generation", inactive=import_only("RL sampling does not use beam search"), description="Length exponent used by beam search.")
    do_sample: bool = fld(True, category="Generation", description="Sample tokens; false decodes greedily.")
    stop_strings: list[str] | None = fld(
        None, category="Generation", description="Generation stops once any of these strings appears."
    )
    stop_token_ids: list[int] | None = fld(
        None, category="Generation", description="Generation stops at any of these token ids (besides EOS)."
    )
    ignore_eos: bool = fld(False, category="Generation", description="Keep generating after the EOS token.")
    include_stop_str_in_output: bool = fld(
        True, category="Generation",
        inactive=import_only("a response always keeps the token that completes a stop string"),
        description="Keep the stop string at the end of the response (vLLM's sampling option).",
    )
    seed: int | None = fld(None, category="Generation", ge=0, le=SEED_MAX, description="Sampling seed; unset derives it from the pipeline seed.")


class BatchKnobs(Section):
    """Batch sizes and lengths."""

    rollout_batch_size: int = fld(128, category="Batch sizes", ge=1, common=True, description="Prompts sampled per step.")
    val_batch_size: int = fld(128, category="Batch sizes", ge=1, description="Prompts per evaluation batch.")
    num_return_sequences_in_group: int = fld(
        1, category="Batch sizes", ge=1, common=True,
        description="Responses sampled per prompt (the GRPO group); samples per step = rollout_batch_size x this.",
    )
    prompt_length: int = fld(1024, category="Batch sizes", ge=1, common=True, description="Longest prompt in tokens.")
    response_length: int = fld(1024, category="Batch sizes", ge=1, common=True, description="Longest response in tokens.")
    sequence_length: int | None = fld(
        None, category="Batch sizes", ge=1,
        description="Longest prompt + response; unset is their sum. An agentic file that sets it and leaves "
        "prompt_length and response_length unset caps each whole trajectory at it, as ROLL does (decision 0055).",
    )


class GenerationSchedulingKnobs(Section):
    """Scheduling of generation requests, dynamic sampling's extra prompts."""

    generate_opt_level: Literal[0, 1] = fld(
        1, category="Generation", inactive=import_only("ROLL's request scheduler; our engines take each batch whole"),
        description="0 sends the whole batch to generate at once; 1 streams requests through a scheduler.",
    )
    is_num_return_sequences_expand: bool = fld(
        False, category="Generation", inactive=import_only("ROLL's request scheduler; our engines take each batch whole"),
        description="Send each prompt n times with one sample each instead of one request asking for n samples.",
    )
    max_running_requests: int = fld(128, category="Generation", inactive=import_only("ROLL's request scheduler; our engines take each batch whole"), ge=1, description="Most requests in flight per engine.")
    is_use_additional_prompts: bool = fld(
        False, category="Generation",
        description="Dynamic sampling: draw extra prompts to replace the groups a reward's query_filter_config "
        "drops, until rollout_batch_size groups pass (sync rollout).",
    )
    max_additional_running_prompts: int = fld(
        16, category="Generation", ge=0,
        description="Extra prompts one step may draw beyond rollout_batch_size; past it, filtered groups fill "
        "the batch and stay out of the loss (when no group passed, the actor does not step).",
    )
    async_generation_ratio: float = fld(
        0.0, category="Async rollout", ge=0,
        description="ROLL's knob: rollout batches generation may run ahead of the step being trained (whole "
        "numbers only). With rollout_mode unset: 0 is sync, 1 one_step_off, 2 or more async with that lookahead.",
    )


class AsyncRolloutKnobs(Section):
    """Asynchronous rollout (docs/decisions/0017)."""

    rollout_mode: Literal["sync", "one_step_off", "async"] | None = fld(
        None, category="Async rollout",
        description="sync: generate with the current weights, then train. one_step_off: batch k+1 is generated "
        "while step k trains (one policy version old). async: a producer keeps generating, up to "
        "async_generation_ratio batches ahead, with the latest synced weights. Unset follows async_generation_ratio. "
        "Overlap needs actor_infer and actor_train on different devices.",
    )
    max_staleness: int | None = fld(
        None, category="Async rollout", ge=0,
        description="Policy versions a trained sample may lag behind the policy being updated; older batches are "
        "treated as stale_samples says. Unset: the lookahead (1 for one_step_off), which no batch exceeds.",
    )
    stale_samples: Literal["drop", "downweight"] = fld(
        "drop", category="Async rollout",
        description="Batches older than max_staleness: drop (discard them and regenerate their prompts with the "
        "latest weights; no prompt is lost) or downweight (train them with loss weight "
        "stale_sample_decay ^ (staleness - max_staleness)).",
    )
    stale_sample_decay: float = fld(
        0.5, category="Async rollout", ge=0, le=1,
        description="Loss weight factor per policy version beyond max_staleness (stale_samples: downweight).",
    )
    off_policy_correction: Literal["none", "tis", "mask"] = fld(
        "tis", category="Async rollout",
        description="Correction of samples with staleness > 0, with rho = pi_old / mu per token (mu: the rollout "
        "engine's log-probs, pi_old: actor_train's recompute): tis weights the policy-gradient term by "
        "min(rho, off_policy_cap); mask leaves tokens with rho outside [1/cap, cap] out of the loss; none trusts the "
        "PPO ratio alone.",
    )
    off_policy_cap: float = fld(
        2.0, category="Async rollout", gt=1,
        description="C of the off-policy correction: tis truncates rho at C, mask keeps tokens with rho in [1/C, C].",
    )
