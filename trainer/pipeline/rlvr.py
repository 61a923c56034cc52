"""The RLVR loop (single controller).

Per step: sample prompts -> generate n responses per prompt (actor_infer) -> score (reward) ->
reference and old log-probs (reference, actor_train) -> values (critic) -> sample mask
(difficulty_mask) -> reward processing (add_len_reward, clip, normalisation) -> token rewards (KL in
reward) -> advantages -> loss weights (difficulty / length) -> critic and actor updates (ppo_epochs x
mini-batches) -> weight sync to actor_infer -> eval every eval_steps -> checkpoint every save_steps
-> metrics.

Every random choice is derived from ``(seed, step)`` or restored from a checkpoint, so a run
resumed at step k reproduces the uninterrupted run's later steps exactly (on the same hardware).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.algorithms import kl as kl_algos
from trainer.algorithms.advantages import compute_advantages
from trainer.checkpoint import core as ckpt
from trainer.config.topology import train_shape
from trainer.pipeline import rewarding
from trainer.pipeline.batch import build_batch
from trainer.pipeline.metrics import data_metrics
from trainer.pipeline.models import policy_path
from trainer.rollout.base import Generation, SamplingParams

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


TRAIN_ROLES = ("actor_train", "critic")
ROLLOUT_SAMPLES_PER_STEP = 16


class Timer:
    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def __call__(self, name: str) -> _TimerScope:
        return _TimerScope(self, name)


class _TimerScope:
    def __init__(self, timer: Timer, name: str) -> None:
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timer.values[f"timing/{self.name}"] = time.perf_counter() - self.start


def sampling_params(cfg: PipelineConfig, section: Any, *, n: int, seed: int, greedy: bool = False) -> SamplingParams:
    args = section.generating_args if section is not None and section.generating_args else None
    max_new = (args.max_new_tokens if args else None) or cfg.response_length
    if args is None or greedy or not args.do_sample:
        return SamplingParams(max_new_tokens=max_new, temperature=0.0, n=n, seed=seed,
                              stop_token_ids=list(args.stop_token_ids or []) if args else [])
    return SamplingParams(
        max_new_tokens=max_new,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        n=n,
        stop_token_ids=list(args.stop_token_ids or []),
        seed=seed,
    )


class RLVRPipeline:
    """Owns the worker groups, the data sampler, the KL controller and the step counter."""

    def __init__(self, cfg: PipelineConfig, emitter: Any, *, groups: dict[str, Any], tokenizer: Any,
                 train_prompts: list[dict], eval_prompts: list[dict], sampler: Any,
                 log: Callable[[str], None] = print) -> None:
        self.cfg, self.emitter, self.groups, self.tokenizer = cfg, emitter, groups, tokenizer
        self.train_prompts, self.eval_prompts, self.sampler = train_prompts, eval_prompts, sampler
        self.log = log
        self.output_dir = Path(cfg.output_dir)
        self.checkpoints = ckpt.checkpoints_root(cfg)
        self.kl_ctrl = kl_algos.make_kl_controller(cfg.init_kl_coef, cfg.target_kl, cfg.kl_horizon,
                                                   ctrl_type=cfg.kl_ctrl_type)
        if cfg.difficulty_loss_weight and any(p.get("difficulty") is None for p in train_prompts):
            raise ValueError("difficulty_loss_weight: every training prompt needs a `difficulty` value in "
                             "[0, 1] (a `difficulty` column in the data file)")
        self.reward_state = rewarding.RewardStats()
        self.step = 0
        self.step_times: list[float] = []
        self.history: list[dict[str, float]] = []
        self.uses_reference = "reference" in groups
        # One optimizer step on fresh rollouts: the old policy IS the current one, so the loss uses
        # the detached current log-probs and the extra forward pass is skipped (as verl and TRL do).
        actor_world = len(groups["actor_train"].call_all("ping"))
        one_update = train_shape(cfg, "actor_train", actor_world).optimizer_steps_per_rollout == 1
        self.needs_old_log_probs = not one_update or cfg.add_token_level_kl
        # the rollout engine frees its memory while a colocated trainer works (vLLM-style sleep/wake)
        infer_devices = set(cfg.actor_infer.device_mapping or ())
        self.infer_sleeps = bool(infer_devices & set(cfg.actor_train.device_mapping or ()))

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> list[dict[str, float]]:
        cfg = self.cfg
        resume = resume_target(cfg, self.checkpoints)
        if resume is not None:
            self.load_checkpoint(resume)
            self.log(f"resumed from {resume} at step {self.step}")
        self.emitter.status("running", step=self.step, total_steps=cfg.max_steps)
        if cfg.val_before_train and self.step == 0 and self.eval_prompts:
            self.emitter.metrics(self.evaluate(), step=0)
        while self.step < cfg.max_steps:
            started = time.perf_counter()
            metrics = self.train_step(self.step + 1)
            self.step += 1
            if cfg.eval_steps > 0 and self.step % cfg.eval_steps == 0 and self.eval_prompts:
                metrics.update(self.evaluate())
            self.step_times.append(time.perf_counter() - started)
            metrics["timing/step"] = self.step_times[-1]
            self.history.append(metrics)
            if self.step % cfg.logging_steps == 0 or self.step == cfg.max_steps:
                self.emitter.metrics(metrics, step=self.step)
            self.emitter.status("running", step=self.step, total_steps=cfg.max_steps, eta_s=self.eta())
            self.log(self.progress_line(metrics))
            if self.step % cfg.save_steps == 0 or self.step == cfg.max_steps:
                self.save_checkpoint()
        return self.history

    def eta(self) -> float:
        recent = self.step_times[-10:]
        return (sum(recent) / len(recent)) * (self.cfg.max_steps - self.step) if recent else 0.0

    def progress_line(self, metrics: dict[str, float]) -> str:
        eta = int(self.eta())
        parts = [f"step {self.step}/{self.cfg.max_steps}", f"reward {metrics.get('reward/mean', math.nan):.3f}"]
        if "eval/reward/mean" in metrics:
            parts.append(f"eval {metrics['eval/reward/mean']:.3f}")
        parts += [f"{self.step_times[-1]:.2f} s/step", f"ETA {eta // 60}m{eta % 60:02d}s"]
        return " | ".join(parts)

    # -- one step -------------------------------------------------------------------------------
    def generate(self, records: list[dict], params: SamplingParams) -> list[Generation]:
        """Generate through the actor_infer group; prompt indices are global to ``records``."""
        group = self.groups["actor_infer"]
        ids = [r["input_ids"] for r in records]
        if self.infer_sleeps:
            group.call_all("wake")
        per_rank = group.call_sharded("generate", {"prompt_ids": ids}, params=params)
        if self.infer_sleeps:
            group.call_all("sleep")
        shard = len(ids) // max(1, len(per_rank))
        gens: list[Generation] = []
        for rank, part in enumerate(per_rank):
            for g in part:
                g.prompt_index += rank * shard
                gens.append(g)
        return sorted(gens, key=lambda g: (g.prompt_index, g.sample_index))

    def score(self, records: list[dict], gens: list[Generation]) -> tuple[list[str], torch.Tensor]:
        responses = [self.tokenizer.decode(g.token_ids, skip_special_tokens=True) for g in gens]
        samples = [records[g.prompt_index] for g in gens]
        prompts = [s["prompt"] for s in samples]
        scores = self.groups["reward"].call_rank0(
            "score", {"prompts": prompts, "responses": responses, "samples": samples}
        )
        return responses, torch.tensor(scores, dtype=torch.float32)

    def train_step(self, step: int) -> dict[str, float]:
        cfg, timer = self.cfg, Timer()
        metrics: dict[str, float] = {}
        records = [self.train_prompts[i] for i in self.sampler.next_batch()]
        n = cfg.num_return_sequences_in_group
        with timer("generate"):
            params = sampling_params(cfg, cfg.actor_infer, n=n, seed=cfg.seed * 1_000_003 + step)
            gens = self.generate(records, params)
        with timer("reward"):
            responses, scores = self.score(records, gens)
        batch = build_batch(
            [records[g.prompt_index]["input_ids"] for g in gens],
            [g.token_ids for g in gens],
            self.tokenizer.pad_token_id,
        )
        mask = batch["response_mask"]
        batch["scores"] = scores
        group_ids = torch.tensor([g.prompt_index for g in gens], dtype=torch.long)
        if self.needs_old_log_probs:
            with timer("old_log_probs"):
                batch["old_log_probs"] = torch.cat(self.groups["actor_train"].call_sharded("compute_log_probs", batch))
        if self.uses_reference:
            with timer("ref_log_probs"):
                batch["ref_log_probs"] = torch.cat(self.groups["reference"].call_sharded("compute_log_probs", batch))
        values = None
        if "critic" in self.groups:
            with timer("values"):
                values = torch.cat(self.groups["critic"].call_sharded("compute_values", batch))

        with timer("advantages"):
            keep, mask_metrics = rewarding.sample_mask(cfg, scores, group_ids)
            metrics.update(mask_metrics)
            processed, self.reward_state, reward_metrics = rewarding.process_scores(
                cfg, scores, group_ids, self.reward_state, response_lengths=mask.sum(-1)
            )
            metrics.update(reward_metrics)
            if cfg.add_token_level_kl and self.uses_reference:
                token_kl = kl_algos.token_kl(  # KL of the rollout policy (= actor before this update)
                    cfg.kl_penalty, mask, log_probs=batch["old_log_probs"], ref_log_probs=batch["ref_log_probs"]
                )
                token_rewards, current_kl = kl_algos.add_kl_to_rewards(processed, token_kl, mask, self.kl_ctrl.value)
                metrics["actor/reward_kl"] = metrics["actor/reward_kl_penalty"] = current_kl  # ours, verl's
                metrics["actor/kl_coef"] = metrics["actor/reward_kl_penalty_coeff"] = self.kl_ctrl.value
                self.kl_ctrl = self.kl_ctrl.update(current_kl, n_steps=len(gens))
            else:
                token_rewards = kl_algos.scores_to_token_rewards(processed, mask)
            token_rewards = rewarding.process_token_rewards(cfg, token_rewards, mask)
            adv = compute_advantages(
                cfg.adv_estimator, token_rewards, mask, group_ids=group_ids, values=values,
                gamma=cfg.gamma, lambd=cfg.lambd, norm_adv_by_std_in_grpo=cfg.norm_adv_by_std_in_grpo,
            )
            batch["advantages"] = rewarding.process_advantages(cfg, adv.advantages, mask)
            if values is not None:
                batch["values"], batch["returns"] = values, adv.returns
        # the actor's loss sees only the kept samples (the critic still fits every sample's return)
        actor_batch = {**batch, "response_mask": mask * keep.unsqueeze(-1).to(mask.dtype)}
        difficulty = (torch.tensor([float(records[g.prompt_index]["difficulty"]) for g in gens])
                      if cfg.difficulty_loss_weight else None)
        weights = rewarding.sample_weights(cfg, mask, difficulty)
        if weights is not None:
            actor_batch["sample_weights"] = weights

        if "critic" in self.groups:
            with timer("critic_update"):
                metrics.update(_mean_dicts(self.groups["critic"].call_sharded("train_step", batch, step=step)))
        if step > cfg.critic_warmup:
            with timer("actor_update"):
                metrics.update(_mean_dicts(
                    self.groups["actor_train"].call_sharded("train_step", actor_batch, step=step)))
            with timer("weight_sync"):
                self.sync_weights()

        metrics.update(data_metrics(
            scores=scores, token_rewards=token_rewards, advantages=batch["advantages"], response_mask=mask,
            prompt_lengths=torch.tensor([len(records[g.prompt_index]["input_ids"]) for g in gens]),
            max_prompt_length=cfg.prompt_length,
            truncated=torch.tensor([g.stop_reason == "length" for g in gens]),
            values=values, returns=batch.get("returns"),
        ))
        metrics.update(timer.values)
        self.emit_rollouts(step, records, gens, responses, scores, batch["advantages"], mask)
        return metrics

    def sync_weights(self) -> None:
        state = self.groups["actor_train"].call_all("full_state_dict")[0]
        self.groups["actor_infer"].call_all("load_weights", state)

    def emit_rollouts(self, step: int, records: list[dict], gens: list[Generation], responses: list[str],
                      scores: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> None:
        samples = []
        for i, g in enumerate(gens[:ROLLOUT_SAMPLES_PER_STEP]):
            real = mask[i] > 0
            samples.append({
                "prompt": records[g.prompt_index]["prompt"],
                "response": responses[i],
                "reward": float(scores[i]),
                "advantage": float(advantages[i][real].mean()) if bool(real.any()) else 0.0,
                "prompt_length": len(records[g.prompt_index]["input_ids"]),
                "response_length": len(g.token_ids),
                "stop_reason": g.stop_reason,
                "group_id": g.prompt_index,
                "sample_index": g.sample_index,
                "tokens": self.tokenizer.convert_ids_to_tokens(g.token_ids),
                "token_logprobs": [round(x, 5) for x in g.logprobs],
                "token_advantages": [round(float(x), 5) for x in advantages[i][real]],
            })
        self.emitter.rollouts(samples, step=step)

    # -- evaluation -----------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        cfg = self.cfg
        section = cfg.validation
        # val_n_sample responses per prompt; greedy when val_greedy is set or no sampling is configured
        n = cfg.val_n_sample
        greedy = cfg.val_greedy or section is None or section.generating_args is None
        records = self.eval_prompts
        all_scores = []
        for start in range(0, len(records), cfg.val_batch_size):
            part = records[start : start + cfg.val_batch_size]
            params = sampling_params(cfg, section, n=n, seed=cfg.seed + 7 * start, greedy=greedy)
            gens = self.generate(part, params)
            _, scores = self.score(part, gens)
            all_scores.append(scores)
        scores = torch.cat(all_scores)
        return {
            "eval/reward/mean": float(scores.mean()),
            "eval/accuracy": float((scores >= 1.0).float().mean()),
            "eval/num_samples": float(scores.numel()),
        }

    # -- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        started = time.perf_counter()
        with ckpt.atomic_checkpoint_dir(self.checkpoints, self.step) as tmp:
            state = {
                "step": self.step,
                "sampler": self.sampler.state_dict(),
                "kl_ctrl": {"type": type(self.kl_ctrl).__name__, **asdict(self.kl_ctrl)},
                "reward_stats": self.reward_state.state_dict(),
                "step_times": self.step_times[-10:],
            }
            (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
            torch.save(ckpt.get_rng_state(), tmp / "driver_rng.pt")
            for role in ("actor_train", "critic"):
                if role in self.groups:
                    self.groups[role].call_all("save_checkpoint", str(tmp))
            for role in ("actor_infer", "reference"):
                if role in self.groups:
                    self.groups[role].call_all("save_rng", str(tmp))
            self.groups["actor_train"].call_all("save_hf", str(tmp / "hf_model"), policy_path(self.cfg))
        final = self.checkpoints / f"step_{self.step}"
        removed = ckpt.enforce_retention(self.checkpoints, self.cfg.max_ckpts_to_keep)
        contents = ["model", "optimizer", "scheduler", "rng", "data"]
        self.emitter.checkpoint(step=self.step, path=str(final), size_bytes=ckpt.checkpoint_size(final),
                                contents=contents)
        self.log(f"saved checkpoint {final} in {time.perf_counter() - started:.1f} s"
                 + (f" (removed {len(removed)} old)" if removed else ""))

    def load_checkpoint(self, path: Path) -> None:
        state = json.loads((path / "trainer_state.json").read_text())
        self.step = int(state["step"])
        self.sampler.load_state_dict(state["sampler"])
        kl_state = dict(state["kl_ctrl"])
        kind = kl_state.pop("type")
        self.kl_ctrl = (kl_algos.AdaptiveKLController if kind == "AdaptiveKLController"
                        else kl_algos.FixedKLController)(**kl_state)
        self.reward_state = rewarding.RewardStats.from_state_dict(state["reward_stats"])
        self.step_times = list(state.get("step_times", []))
        for role in ("actor_train", "critic"):
            if role in self.groups:
                self.groups[role].call_all("load_checkpoint", str(path))
        for role in ("actor_infer", "reference"):
            if role in self.groups:
                self.groups[role].call_all("load_rng", str(path))
        ckpt.set_rng_state(torch.load(path / "driver_rng.pt", weights_only=True))
        self.sync_weights()


def resume_target(cfg: PipelineConfig, root: Path) -> Path | None:
    """The checkpoint to resume from: ``resume_mode`` (none / latest / path) when set, else
    ``resume_from_checkpoint`` (false, true / "latest", or a path)."""
    if cfg.resume_mode == "none":
        return None
    if cfg.resume_mode == "latest":
        return ckpt.resolve_resume_path("latest", root)
    if cfg.resume_mode == "path" and cfg.resume_from_checkpoint in (True, False, "latest", "true", "false"):
        raise ValueError("resume_from_checkpoint: resume_mode 'path' needs a checkpoint path here")
    return ckpt.resolve_resume_path(cfg.resume_from_checkpoint, root)


def _mean_dicts(dicts: list[dict[str, float]]) -> dict[str, float]:
    keys = dicts[0].keys()
    return {k: sum(d[k] for d in dicts) / len(dicts) for k in keys}
