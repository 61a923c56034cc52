"""The RLVR loop (single controller).

Per step: sample prompts -> generate n responses per prompt (actor_infer) -> score (reward) ->
reference and old log-probs (reference, actor_train) -> values (critic) -> sample mask
(difficulty_mask) -> reward processing (add_len_reward, clip, normalisation) -> token rewards (KL in
reward) -> advantages -> loss weights (difficulty / length) -> critic and actor updates (ppo_epochs x
mini-batches) -> weight sync to actor_infer -> eval every eval_steps -> checkpoint every save_steps
-> metrics.

Every random choice is derived from ``(seed, step)`` or restored from a checkpoint, so a run
resumed at step k reproduces the uninterrupted run's later steps exactly (on the same hardware).

rollout_mode one_step_off / async (docs/decisions/0017): a producer thread draws and generates batch
k+1… while step k trains (`async_rollout`); stale batches are dropped and regenerated, or
down-weighted, and off-policy samples are corrected by π_old/μ (`trainer.algorithms.off_policy`).
Every prompt's fate goes to the run's ledger (`ledger`). Batch j is always trained at step j.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer import roles
from trainer.checkpoint import core as ckpt
from trainer.config import topology
from trainer.config.schema import VllmConfig
from trainer.models.batch import build_batch
from trainer.pipeline import dynamic_sampling
from trainer.pipeline.async_rollout import PendingBatch, Rollout, RolloutProducer, draw_batch
from trainer.pipeline.learner import Learner, LearnerSpec, RolloutBatch
from trainer.pipeline.metrics import data_metrics
from trainer.pipeline.run import resume_report
from trainer.pipeline.run.health import HealthMonitor, SampleFacts
from trainer.pipeline.run.ledger import LEDGER_FILE, Ledger
from trainer.pipeline.run.models import policy_path
from trainer.pipeline.run.profiling import StepProfiler
from trainer.rollout.base import Generation, SamplingParams

if TYPE_CHECKING:
    from trainer.cluster.worker_group import Group
    from trainer.config.schema import PipelineConfig
    from trainer.pipeline.run.watchdog import Watchdog


ROLLOUT_BUFFER_FILE = "rollout_buffer.json"  # a checkpoint's generated, not yet trained batches


class Timer:
    """`timing/<phase>` seconds of one step's phases, each also inside `watch(phase)` (the watchdog's)."""

    def __init__(self, watch: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None) -> None:
        self.values: dict[str, float] = {}
        self.watch = watch

    def __call__(self, name: str) -> _TimerScope:
        return _TimerScope(self, name)


class _TimerScope:
    def __init__(self, timer: Timer, name: str) -> None:
        self.timer, self.name = timer, name
        self.watched = timer.watch(name) if timer.watch is not None else contextlib.nullcontext()

    def __enter__(self) -> None:
        self.watched.__enter__()
        self.start = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        self.timer.values[f"timing/{self.name}"] = time.perf_counter() - self.start
        self.watched.__exit__(*exc)


def sampling_seed(cfg: PipelineConfig, section: Any) -> int:
    """generating_args.seed of the sampling role when set, else the pipeline seed."""
    args = section.generating_args if section is not None else None
    return cfg.seed if args is None or args.seed is None else args.seed


def sampling_params(cfg: PipelineConfig, section: Any, *, n: int, seed: int, greedy: bool = False) -> SamplingParams:
    args = section.generating_args if section is not None and section.generating_args else None
    max_new = (args.max_new_tokens if args else None) or cfg.response_length
    # stop and length knobs act in greedy and sampled decoding alike
    knobs: dict[str, Any] = {}
    if args is not None:
        if (args.min_new_tokens or 0) > max_new:
            raise ValueError(f"generating_args.min_new_tokens: {args.min_new_tokens} exceeds the {max_new} tokens "
                             "a response may have (max_new_tokens, else response_length)")
        knobs = {"stop_token_ids": list(args.stop_token_ids or []), "stop_strings": list(args.stop_strings or []),
                 "min_new_tokens": args.min_new_tokens or 0, "repetition_penalty": args.repetition_penalty,
                 "ignore_eos": args.ignore_eos}
    if args is None or greedy or not args.do_sample:
        return SamplingParams(max_new_tokens=max_new, temperature=0.0, n=n, seed=seed, **knobs)
    return SamplingParams(
        max_new_tokens=max_new,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        n=n,
        seed=seed,
        **knobs,
    )


def rollout_log_probs(gens: list[Generation], width: int) -> torch.Tensor:
    """The engine's per-token log-probs laid out like the batch's responses: [B, width], 0 on padding."""
    # one tensor from padded lists: a tensor per row costs ~1 ms a step on the trainer's critical path
    return torch.tensor([list(g.logprobs) + [0.0] * (width - len(g.logprobs)) for g in gens],
                        dtype=torch.float32).reshape(len(gens), width)


WEIGHT_BUCKET_BYTES = 256 * 2**20  # an in-process weight sync holds at most this much beyond both models


def weights_in_process(cfg: PipelineConfig, groups: roles.RoleGroups) -> bool:
    """Whether weight sync can hand actor_train's tensors to actor_infer on their device (bucketed, in
    the engine's dtype): both roles in this process, a trainer whose full weights are its own
    parameters or FSDP2 shards gathered on the device, and an engine that loads any subset (hf_infer).
    Otherwise full CPU state dicts travel (Ray's object store, vLLM's reload)."""
    train = topology.strategy_name("actor_train", cfg.actor_train)
    options = topology.strategy_config(cfg.actor_train)
    return ("actor_train" in groups and groups["actor_train"].in_process and groups["actor_infer"].in_process
            and topology.strategy_name("actor_infer", cfg.actor_infer) == "hf_infer"
            and (train == "torch_train" or (train == "fsdp2_train" and not options.cpu_offload)))


def push_weights_in_process(train: Group[roles.Actor], infer: Group[roles.Rollout],
                            bucket_bytes: int = WEIGHT_BUCKET_BYTES) -> int:
    """actor_train's weights into actor_infer's engine bucket by bucket, on the engine's device and in
    its dtype (one GPU: device to device, no CPU round trip). Returns the number of buckets sent.

    A colocated engine sleeps (weights parked on the CPU) while the trainer works; it is woken first,
    so the weights land where they will run: generation is the engine's next use either way, and
    loading into the parked copy would send every tensor through the CPU twice."""
    infer.call_all(roles.Rollout.wake)
    device, dtype = infer.call_rank0(roles.Rollout.weight_format)
    sent = 0
    for bucket in train.call_rank0(roles.Actor.weight_buckets, device, dtype, bucket_bytes):
        infer.call_all(roles.Rollout.load_weights, bucket)
        sent += 1
    return sent


class RLVRPipeline:
    """Owns the worker groups, the data sampler, the learner (trainer.pipeline.learner) and the step counter."""

    rollout_type: type[Rollout] = Rollout  # what `collect` returns; a checkpoint's buffer is read back as it

    def __init__(self, cfg: PipelineConfig, emitter: Any, *, groups: roles.RoleGroups, tokenizer: Any,
                 train_prompts: list[dict], eval_prompts: Sequence[Any], sampler: Any,
                 log: Callable[[str], None] = print) -> None:
        self.cfg, self.emitter, self.groups, self.tokenizer = cfg, emitter, groups, tokenizer
        self.train_prompts, self.eval_prompts, self.sampler = train_prompts, eval_prompts, sampler
        self.log = log
        self.output_dir = Path(cfg.output_dir)
        self.checkpoints = ckpt.checkpoints_root(cfg)
        if cfg.difficulty_loss_weight and any(p.get("difficulty") is None for p in train_prompts):
            raise ValueError("difficulty_loss_weight: every training prompt needs a `difficulty` value in "
                             "[0, 1] (a `difficulty` column in the data file)")
        self.step = 0
        self.step_times: list[float] = []
        self.history: list[dict[str, float]] = []
        self.weights_in_process = weights_in_process(cfg, groups)
        # the rollout engine frees its memory while a colocated trainer works (vLLM-style sleep/wake)
        infer_devices = set(cfg.actor_infer.device_mapping or ())
        self.infer_sleeps = bool(infer_devices & set(cfg.actor_train.device_mapping or ()))
        self.schedule = topology.rollout_schedule(cfg)
        if "actor_train" in groups:  # a rollout-only run (pipeline_mode rollout_only) has no learner
            self.learner = self.build_learner()
        self.ledger = Ledger(self.output_dir / LEDGER_FILE)
        self.producer: RolloutProducer | None = None  # one_step_off / async
        self.backlog: list[Rollout | PendingBatch] = []  # sync: batches an async checkpoint left drawn
        self.refill_metrics: dict[str, float] = {}  # dynamic sampling's for the batch being trained
        self.watchdog: Watchdog | None = None  # set by the runner: every phase below runs inside watch()
        self.profiler = StepProfiler(cfg, groups, emitter)  # profiler_timeline / profiler_memory over profiler_steps
        self.health = HealthMonitor(cfg.health)  # run-health alerts, checked on every step's metrics and samples
        self.step_samples: list[SampleFacts] = []  # the step's responses, for the health checks of samples

    def build_learner(self) -> Learner:
        """The update and its corrections (trainer.pipeline.learner); its state goes into the checkpoints."""
        cfg, groups = self.cfg, self.groups
        actor_world = len(groups["actor_train"].call_all(roles.Role.ping))
        spec = LearnerSpec.from_config(cfg)  # the knobs the learner reads, and no others
        steps = topology.train_shape(cfg, "actor_train", actor_world).optimizer_steps_per_rollout
        return Learner(spec, groups, schedule=self.schedule, recomputes=spec.recomputes_log_probs(steps))

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> list[dict[str, float]]:
        cfg = self.cfg
        resume, asked = self.find_resume()
        held: dict[str, Any] = {}
        if resume is not None:
            held = self.load_checkpoint(resume, asked=asked or str(resume))
            self.log(f"resumed from {resume} at step {self.step}")
        elif isinstance(engine := topology.strategy_config(cfg.actor_infer), VllmConfig) and engine.load_format == "dummy":
            self.sync_weights()  # the engine started with random weights: push the policy's
        self.record_start(resume, held)
        self.emitter.status("running", step=self.step, total_steps=cfg.max_steps)
        try:
            if cfg.val_before_train and self.step == 0 and self.eval_prompts:
                with self.watch("eval"):
                    self.emitter.metrics(self.evaluate(), step=0)
            if self.schedule.overlaps:
                self.producer = RolloutProducer(
                    collect=self.collect, load_weights=self.load_engine_weights, sampler=self.sampler,
                    ledger=self.ledger, lookahead=self.schedule.lookahead, last_batch=cfg.max_steps,
                    trained_steps=self.step, next_batch=held.get("next_batch", self.step + 1),
                    buffer=held.get("buffer", ()), pending=held.get("pending", ()))
                self.producer.start()
            else:
                self.backlog = sorted([*held.get("buffer", ()), *held.get("pending", ())],
                                      key=lambda b: b.batch_id)
            while self.step < cfg.max_steps:
                started = time.perf_counter()
                step = self.step + 1
                with self.profiler.step(step):
                    metrics = self.train_step(step) if self.producer is None else self.async_step(step)
                self.step = step
                if cfg.eval_steps > 0 and self.step % cfg.eval_steps == 0 and self.eval_prompts:
                    with self.watch("eval"):
                        metrics.update(self.evaluate())
                self.step_times.append(time.perf_counter() - started)
                metrics["timing/step"] = self.step_times[-1]
                self.history.append(metrics)
                if self.step % cfg.logging_steps == 0 or self.step == cfg.max_steps:
                    self.emitter.metrics(metrics, step=self.step)
                self.check_health(metrics)
                self.emitter.status("running", step=self.step, total_steps=cfg.max_steps, eta_s=self.eta())
                self.log(self.progress_line(metrics))
                if self.step % cfg.save_steps == 0 or self.step == cfg.max_steps:
                    with self.watch("checkpoint"):
                        self.save_checkpoint()
            left = self.producer.leftovers() if self.producer is not None else [b.batch_id for b in self.backlog]
            self.ledger.record("end", step=self.step, left=left)
        finally:
            if self.producer is not None:
                # after a failure the producer may sit in a call that never returns (weights a stopped rank
                # never produced): a moment for it to finish, not the whole stop timeout (it is a daemon)
                self.producer.stop(timeout_s=120.0 if sys.exc_info()[0] is None else 5.0)
            self.ledger.close()
        return self.history

    def check_health(self, metrics: dict[str, float]) -> None:
        """The step's run-health alerts (trainer.pipeline.run.health) as `alert` events and log lines."""
        for alert in self.health.check(self.step, metrics, self.step_samples):
            self.emitter.alert(alert.data(), step=self.step)
            self.log(f"health alert at step {self.step}: {alert.kind} ({alert.metric}): {alert.message}")

    def watch(self, phase: str) -> contextlib.AbstractContextManager[Any]:
        """The watchdog's scope of `phase` (trainer.pipeline.run.watchdog), when the runner set one."""
        return self.watchdog.phase(phase) if self.watchdog is not None else contextlib.nullcontext()

    def find_resume(self) -> tuple[Path | None, str | None]:
        """The checkpoint to resume from and what the config asked for. Asked for and not found: the attempt
        fails with its resume report when the output directory shows earlier training (resume_report)."""
        asked = resume_report.resume_asked(self.cfg.resume_mode, self.cfg.resume_from_checkpoint)
        try:
            resume = resume_target(self.cfg, self.checkpoints)
        except FileNotFoundError as exc:
            self.report_resume(resume_report.no_checkpoint(asked or "?", self.checkpoints, self.ledger.path,
                                                           error=str(exc)))
            raise  # report_resume raised already; for the type checker
        if resume is None and asked is not None:
            self.report_resume(resume_report.no_checkpoint(asked, self.checkpoints, self.ledger.path))
        return resume, asked

    def report_resume(self, report: resume_report.ResumeReport) -> None:
        """Write, emit and log the report; one that does not add up ends the attempt (ResumeError)."""
        resume_report.write(report, self.output_dir)
        self.emitter.resume(report.to_dict(), step=self.step)
        self.emitter.log("info" if report.ok else "error", report.lines())
        for line in report.lines():
            self.log(line)
        if not report.ok:
            raise resume_report.ResumeError(report.summary())

    def record_start(self, resume: Path | None, held: dict[str, Any]) -> None:
        """The ledger's first record of this attempt: a fresh start, or what the checkpoint holds."""
        settings = {"mode": self.schedule.mode, "lookahead": self.schedule.lookahead,
                    "max_staleness": self.schedule.max_staleness, "stale_samples": self.cfg.stale_samples,
                    "max_steps": self.cfg.max_steps}
        if resume is None:
            self.ledger.record("start", position=self.sampler.position, **settings)
            return
        same_run = held.get("ledger_path") == str(self.ledger.path.resolve())  # else a fork: its own ledger
        self.ledger.record(
            "resume", step=self.step, checkpoint=str(resume), upto=held["ledger_lines"] if same_run else None,
            next_batch=held["next_batch"], position=self.sampler.position,
            buffer={r.batch_id: r.prompt_indices for r in held["buffer"]},
            pending={p.batch_id: p.prompt_indices for p in held["pending"]}, **settings)

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
            group.call_all(roles.Rollout.wake)
        per_rank = group.call_sharded(roles.Rollout.generate, {"prompt_ids": ids}, params=params)
        if self.infer_sleeps:
            group.call_all(roles.Rollout.sleep)
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
            roles.Reward.score, {"prompts": prompts, "responses": responses, "samples": samples}
        )
        return responses, torch.tensor(scores, dtype=torch.float32)

    def collect(self, batch_id: int, prompt_indices: list[int], version: int) -> Rollout:
        """Generate n responses per prompt with the engine's weights (policy `version`), seeded by the
        batch id, and score them."""
        cfg = self.cfg
        records = [self.train_prompts[i] for i in prompt_indices]
        started = time.perf_counter()
        params = sampling_params(cfg, cfg.actor_infer, n=cfg.num_return_sequences_in_group,
                                 seed=sampling_seed(cfg, cfg.actor_infer) * 1_000_003 + batch_id)
        with self.watch("generate"):
            gens = self.generate(records, params)
        generated = time.perf_counter()
        with self.watch("reward"):
            responses, scores = self.score(records, gens)
        return Rollout(batch_id, list(prompt_indices), version, gens, responses, scores,
                       generate_s=generated - started, reward_s=time.perf_counter() - generated)

    def train_step(self, step: int) -> dict[str, float]:
        """A synchronous step: batch `step` generated by the current policy, learned from, weights synced."""
        timer = Timer(self.watch)
        rollout = self.sync_rollout(step)
        metrics = self.learn(step, rollout, timer)
        metrics.update(self.refill_metrics)
        if step > self.cfg.critic_warmup:
            with timer("weight_sync"):
                self.sync_weights()
        metrics.update(timer.values)
        return metrics

    def sync_rollout(self, step: int) -> Rollout:
        """Batch `step`: freshly drawn, or drawn by the async run whose checkpoint this resumed; sync trains
        on-policy, so a batch that checkpoint generated with older weights is dropped and regenerated."""
        if self.backlog and self.backlog[0].batch_id == step:
            held = self.backlog.pop(0)
            if isinstance(held, Rollout) and held.version == step - 1:
                return held
            if isinstance(held, Rollout):
                self.ledger.record("drop", batch=step, step=step, staleness=step - 1 - held.version,
                                   samples=held.samples)
            job = PendingBatch(held.batch_id, held.prompt_indices)
        else:
            job = draw_batch(self.sampler, step, self.ledger)
        rollout = self.collect(job.batch_id, job.prompt_indices, version=step - 1)
        self.ledger.record("generate", batch=step, version=step - 1, samples=rollout.samples)
        if self.cfg.is_use_additional_prompts:
            rollout, self.refill_metrics = dynamic_sampling.refill(
                self.cfg, rollout, records=self.train_prompts, sampler=self.sampler, ledger=self.ledger,
                collect=self.collect)
        return rollout

    def async_step(self, step: int) -> dict[str, float]:
        """A one_step_off / async step: batch `step` from the producer, learned from, weights published
        (the producer loads them into the engine before its next generation)."""
        assert self.producer is not None
        timer = Timer(self.watch)
        rollout, waited, dropped = self.next_rollout(step)
        with self.engine_turn() if self.schedule.time_shared else contextlib.nullcontext():
            metrics = self.learn(step, rollout, timer)
            with timer("weight_sync"):
                updated = step > self.cfg.critic_warmup
                self.producer.publish(step, self.train_weights(wait=False) if updated else None)
        metrics.update(timer.values)
        metrics.update(self.producer.drain_metrics())
        metrics.update({"async/training_idle_s": waited, "async/weight_sync_s": timer.values["timing/weight_sync"],
                        "async/dropped_samples": float(dropped)})
        return metrics

    def next_rollout(self, step: int) -> tuple[Rollout, float, int]:
        """Batch `step` within max_staleness (or down-weighted later); a staler one is dropped and its
        prompts regenerated with the latest weights. Returns it, the seconds waited, the samples dropped."""
        assert self.producer is not None
        waited, dropped = 0.0, 0
        while True:
            rollout, wait = self.producer.take(step)
            waited += wait
            staleness = step - 1 - rollout.version
            if staleness <= self.schedule.max_staleness or self.cfg.stale_samples == "downweight":
                return rollout, waited, dropped
            self.ledger.record("drop", batch=step, step=step, staleness=staleness, samples=rollout.samples)
            dropped += rollout.samples
            self.producer.requeue(rollout)

    def learn(self, step: int, rollout: Rollout, timer: Timer) -> dict[str, float]:
        """Everything after generation: the batch of prompts and responses, the learner's update, then the
        step's data metrics, rollout samples and ledger record."""
        cfg = self.cfg
        records = [self.train_prompts[i] for i in rollout.prompt_indices]
        gens, responses, scores = rollout.gens, rollout.responses, rollout.scores
        timer.values["timing/generate"], timer.values["timing/reward"] = rollout.generate_s, rollout.reward_s
        batch = build_batch(
            [records[g.prompt_index]["input_ids"] for g in gens],
            [g.token_ids for g in gens],
            self.tokenizer.pad_token_id,
        )
        mask = batch["response_mask"]
        group_ids = torch.tensor([g.prompt_index for g in gens], dtype=torch.long)
        engine_log_probs = rollout_log_probs(gens, mask.size(1))
        # every sample carries the policy version that generated it; staleness = versions behind this update
        staleness = (step - 1) - torch.full((len(gens),), rollout.version)
        difficulty = (torch.tensor([float(records[g.prompt_index]["difficulty"]) for g in gens])
                      if cfg.difficulty_loss_weight else None)
        samples = [records[g.prompt_index] for g in gens]
        self.step_samples = [SampleFacts(g.prompt_index, g.sample_index, g.stop_reason, g.token_ids) for g in gens]
        result = self.learner.learn(step, RolloutBatch(
            batch, scores, group_ids, engine_log_probs, staleness, difficulty=difficulty,
            query_filter=dynamic_sampling.query_filter_mask(cfg, samples, scores, group_ids),
            length_terms=dynamic_sampling.length_reward_terms(cfg, samples, mask.sum(-1))), timer)
        metrics = result.metrics
        metrics.update(data_metrics(
            scores=scores, token_rewards=result.token_rewards, advantages=result.advantages, response_mask=mask,
            prompt_lengths=torch.tensor([len(records[g.prompt_index]["input_ids"]) for g in gens]),
            max_prompt_length=cfg.prompt_length,
            truncated=torch.tensor([g.stop_reason == "length" for g in gens]),
            values=result.values, returns=result.returns,
        ))
        self.emit_rollouts(step, records, gens, responses, scores, result.advantages, mask,
                           trainer_log_probs=self.trainer_log_probs(result.old_log_probs))
        weights = result.sample_weights
        self.ledger.record("train", batch=rollout.batch_id, step=step, version=rollout.version,
                           staleness=int(staleness.max()), samples=len(gens), prompts=len(rollout.prompt_indices),
                           **({"weight": float(weights.mean())} if weights is not None else {}))
        return metrics

    def sync_weights(self) -> None:
        if self.weights_in_process:
            push_weights_in_process(self.groups["actor_train"], self.groups["actor_infer"])
            return
        # waited for on every rank: the load waits anyway, and a rank that hangs or fails is reported by
        # actor_train's own call, with the ranks that had not answered
        self.load_engine_weights(self.train_weights(wait=True))

    def train_weights(self, *, wait: bool) -> Any:
        """actor_train's full weights: on Ray a `Deferred` that actor_infer fetches from the object store (the
        tensors never pass through the driver), in one process the state dict itself. wait=False returns
        before actor_train has them: actor_infer's load waits for rank 0, actor_train's next call settles
        every rank."""
        return self.groups["actor_train"].call_all_deferred(roles.Actor.engine_weights, wait=wait)

    def load_engine_weights(self, state: Any) -> None:
        """Weights (a state dict, or train_weights' deferred one) into every actor_infer rank."""
        self.groups["actor_infer"].call_all(roles.Rollout.load_weights, state)

    def engine_turn(self) -> contextlib.AbstractContextManager[Any]:
        """actor_infer to this thread while the producer runs (it generates under the same lock)."""
        return self.producer.engine_lock if self.producer is not None else contextlib.nullcontext()

    def engine_session(self) -> contextlib.AbstractContextManager[Any]:
        """actor_infer to this thread, holding the newest policy (the producer may be behind)."""
        return self.producer.engine_session() if self.producer is not None else contextlib.nullcontext()

    def trainer_log_probs(self, old_log_probs: torch.Tensor | None) -> torch.Tensor | None:
        """actor_train's per-token log-probs of the batch's responses before this update [B, width] (the
        learner's `old_log_probs`), where it computed them and the loss kept them (not replaced by the engine's:
        use_rollout_log_probs): what logged samples carry as `token_logprobs_trainer`, beside the engine's
        `token_logprobs`."""
        return None if self.cfg.use_rollout_log_probs else old_log_probs

    def emit_rollouts(self, step: int, records: list[dict], gens: list[Generation], responses: list[str],
                      scores: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                      trainer_log_probs: torch.Tensor | None = None) -> None:
        """The first `logged_rollout_samples` samples as a `rollouts` event; `token_logprobs` are the engine's
        (sampling), `token_logprobs_trainer` actor_train's of the same tokens when it computed them."""
        count = min(len(gens), self.cfg.logged_rollout_samples)
        # whole tensors to Python lists once: per-row tensor indexing cost ~40 µs a sample on every step
        real = mask[:count] > 0
        token_advantages = advantages[:count].tolist()
        mean_advantages = (torch.where(real, advantages[:count], 0.0).sum(-1) / real.sum(-1).clamp(min=1)).tolist()
        trainer_rows = trainer_log_probs[:count].tolist() if trainer_log_probs is not None else None
        samples = []
        rows = zip(gens[:count], real.tolist(), token_advantages, strict=True)
        for i, (g, row_real, row_advantages) in enumerate(rows):
            sample = {
                "prompt": records[g.prompt_index]["prompt"],
                "response": responses[i],
                "reward": float(scores[i]),
                "advantage": mean_advantages[i],
                "prompt_length": len(records[g.prompt_index]["input_ids"]),
                "response_length": len(g.token_ids),
                "stop_reason": g.stop_reason,
                "group_id": g.prompt_index,
                "sample_index": g.sample_index,
                "tokens": self.tokenizer.convert_ids_to_tokens(g.token_ids),
                "token_logprobs": [round(x, 5) for x in g.logprobs],
                "token_advantages": [round(a, 5) for a, keep in zip(row_advantages, row_real, strict=True) if keep],
            }
            if trainer_rows is not None:  # responses are right-padded: a row's first tokens are its own
                sample["token_logprobs_trainer"] = [round(x, 5) for x in trainer_rows[i][: len(g.token_ids)]]
            samples.append(sample)
        self.emitter.rollouts(samples, step=step)

    # -- evaluation -----------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        cfg = self.cfg
        section = cfg.validation
        # val_n_sample responses per prompt; greedy when val_greedy is set or no sampling is configured
        n = cfg.val_n_sample
        greedy = cfg.val_greedy or section is None or section.generating_args is None
        records: list[dict] = list(self.eval_prompts)  # prompt records (the agentic loop overrides evaluate)
        all_scores = []
        with self.engine_session():
            for start in range(0, len(records), cfg.val_batch_size):
                part = records[start : start + cfg.val_batch_size]
                params = sampling_params(cfg, section, n=n, seed=sampling_seed(cfg, section) + 7 * start,
                                         greedy=greedy)
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
    def rollout_snapshot(self) -> dict[str, Any]:
        """The sampler and the batches drawn but not trained: generated (buffer) or not (pending)."""
        if self.producer is not None:
            return self.producer.snapshot()
        held = self.backlog
        return {"sampler": self.sampler.state_dict(), "position": self.sampler.position,
                "next_batch": max([self.step, *(b.batch_id for b in held)]) + 1, "ledger_lines": self.ledger.lines,
                "buffer": [b for b in held if isinstance(b, Rollout)],
                "pending": [b for b in held if isinstance(b, PendingBatch)]}

    def save_checkpoint(self) -> None:
        started = time.perf_counter()
        held = self.rollout_snapshot()
        with ckpt.atomic_checkpoint_dir(self.checkpoints, self.step) as tmp:
            state = {
                "step": self.step,
                "sampler": held["sampler"],
                **self.learner.state_dict(),  # kl_ctrl, reward_stats
                "step_times": self.step_times[-10:],
                "health": self.health.state_dict(),  # armed alerts and what the checks compare against
                "rollout": {"next_batch": held["next_batch"], "ledger_lines": held["ledger_lines"],
                            "ledger_path": str(self.ledger.path.resolve()),
                            "pending": [asdict(p) for p in held["pending"]]},
            }
            (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
            (tmp / ROLLOUT_BUFFER_FILE).write_text(json.dumps([r.to_state() for r in held["buffer"]]))
            torch.save(ckpt.get_rng_state(), tmp / "driver_rng.pt")
            for role in topology.TRAINING_ROLES:
                if role in self.groups:
                    roles.group_named(self.groups, role).call_all(roles.Trained.save_checkpoint, str(tmp))
            with self.engine_turn():
                self.groups["actor_infer"].call_all(roles.Role.save_rng, str(tmp))
            if "reference" in self.groups:
                self.groups["reference"].call_all(roles.Role.save_rng, str(tmp))
            self.groups["actor_train"].call_all(roles.Actor.save_hf, str(tmp / "hf_model"), policy_path(self.cfg))
        final = self.checkpoints / f"step_{self.step}"
        self.ledger.record("checkpoint", step=self.step, upto=held["ledger_lines"], path=str(final),
                           buffer=[r.batch_id for r in held["buffer"]], pending=[p.batch_id for p in held["pending"]])
        self.ledger.sync()
        removed = ckpt.enforce_retention(self.checkpoints, self.cfg.max_ckpts_to_keep)
        contents = ["model", "optimizer", "scheduler", "rng", "data"]
        self.emitter.checkpoint(step=self.step, path=str(final), size_bytes=ckpt.checkpoint_size(final),
                                contents=contents)
        self.log(f"saved checkpoint {final} in {time.perf_counter() - started:.1f} s"
                 + (f" (removed {len(removed)} old)" if removed else ""))

    def load_checkpoint(self, path: Path, asked: str = "latest") -> dict[str, Any]:
        """Restore every stateful part and report it (resume_report: an attempt whose data position or ledger
        does not add up fails before the models are loaded); returns the rollout state the checkpoint holds
        (batches drawn and not trained, the next batch id, the ledger it was recorded in)."""
        state = json.loads((path / "trainer_state.json").read_text())
        self.step = int(state["step"])
        self.sampler.load_state_dict(state["sampler"])
        kind, kl_state = self.learner.load_state_dict(state)
        self.step_times = list(state.get("step_times", []))
        if "health" in state:  # absent in checkpoints older than the run-health alerts: the checks start over
            self.health.load_state_dict(state["health"])
        rollout = state.get("rollout", {})  # absent in checkpoints older than the ledger
        buffer_file = path / ROLLOUT_BUFFER_FILE
        held = {"next_batch": rollout.get("next_batch", self.step + 1), "ledger_lines": rollout.get("ledger_lines"),
                "ledger_path": rollout.get("ledger_path"),
                "buffer": [self.rollout_type.from_state(r) for r in json.loads(buffer_file.read_text())]
                if buffer_file.exists() else [],
                "pending": [PendingBatch(**p) for p in rollout.get("pending", [])]}
        report = resume_report.ResumeReport(asked=asked, checkpoint=str(path), step=self.step)
        resume_report.check_data_and_ledger(
            report, sampler_state=state["sampler"], position=self.sampler.position, next_batch=held["next_batch"],
            held_batches=[b.batch_id for b in [*held["buffer"], *held["pending"]]], ledger_file=held["ledger_path"],
            ledger_lines=held["ledger_lines"], same_run=held["ledger_path"] == str(self.ledger.path.resolve()))
        if not report.ok:
            self.report_resume(report)
        trained: dict[str, list[dict[str, Any]]] = {}
        for role in topology.TRAINING_ROLES:
            if role in self.groups:
                trained[role] = roles.group_named(self.groups, role).call_all(roles.Trained.load_checkpoint, str(path))
        for role in topology.COMPUTING_ROLES:  # the others' RNG: actor_infer, reference
            if role in self.groups and role not in topology.TRAINING_ROLES:
                roles.group_named(self.groups, role).call_all(roles.Role.load_rng, str(path))
        ckpt.set_rng_state(torch.load(path / "driver_rng.pt", weights_only=True))
        self.sync_weights()
        report.rng = resume_report.restored_rng(path)
        report.optimizer = resume_report.restored_training(trained)
        report.kl = {"type": kind, "value": self.learner.kl_ctrl.value, **kl_state}
        report.reward_norm = self.learner.reward_state.state_dict()
        self.report_resume(report)
        return held


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

