"""The agentic (multi-turn) loop: ROLL's agentic pipeline on the RLVR loop's machinery.

Per step: draw the step's episodes (train_env_manager: env groups of group_size environments
sharing a start state, trainer.envs.manager) -> play them turn by turn through actor_infer with the
chat template, all episodes in lockstep (trainer.pipeline.trajectory) -> one batch row per
trajectory, observation tokens out of the loss mask -> trajectory scores (Σ turn rewards + format
penalties) normalised by `reward_normalization` (trainer.algorithms.trajectory_norm) -> everything
RLVR does after generation (the same `Learner`, trainer.pipeline.learner: log-probs, values, reward
processing, KL, advantages with the start-state groups as GRPO groups, critic and actor updates) -> weight sync.
Evaluation plays val_env_manager's episodes, whose start states are fixed for the whole run.
Step-wise env managers (ROLL's StepEnvManager, `custom_envs.<tag>.env_manager_cls`) play each turn from a fresh
prompt holding a short text history (`history_length`) and train one row per reply (decision 0044).

The run loop, checkpoints (plus the env layout and position), resume, weight sync, the ledger and
telemetry are RLVRPipeline's. Environments run in the driver process, like rule rewards: they are
cheap pure Python. rollout_mode one_step_off (ROLL: async_generation_ratio 1) is RLVRPipeline's too
(trainer.pipeline.async_rollout): the producer thread plays batch j+1's episodes with policy j while
step j trains; each trained row's staleness (≤ 1) reaches the learner and the ledger. rollout_mode
async (ratio ≥ 2) is refused by validation.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer import roles
from trainer.algorithms import step_advantages as step_algos
from trainer.algorithms.trajectory_norm import normalization_groups, normalize_scores
from trainer.config import topology
from trainer.envs.manager import EnvManager, Episode, derive_seed
from trainer.pipeline.async_rollout import Rollout
from trainer.pipeline.learner import RolloutBatch
from trainer.pipeline.metrics import data_metrics
from trainer.pipeline.rlvr import (
    RLVRPipeline,
    Timer,
    sampling_params,
    sampling_seed,
)
from trainer.pipeline.run.health import SampleFacts
from trainer.pipeline.trajectory import (
    PlaySetup,
    Trajectory,
    chat_format,
    env_metrics,
    padded,
    play,
    step_batch,
    step_rows,
    trajectory_batch,
    turn_index,
)
from trainer.rollout.base import Generation, SamplingParams

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


def padded_rows(count: int, multiple: int) -> list[int]:
    """The rows of a training batch of `count` real rows, padded by copies to a multiple of `multiple`
    (ROLL's agentic batch_adjust_mode "copy", agentic_pipeline.py:733-739):

        rows = [0, 1, …, count − 1] + [j mod count for j in 0 … (−count mod multiple) − 1]

    e.g. 128 trajectories, multiple 512 → 512 rows, each trajectory 4 times: one optimizer step whose
    gradient is the 128's own. ROLL draws the copies at random (np.random.choice); this takes them in order,
    so every row is copied ⌊added ÷ count⌋ or one more times."""
    if count <= 0 or multiple <= 0:
        raise ValueError(f"padded_rows: {count} rows to a multiple of {multiple}")
    return list(range(count)) + [j % count for j in range(-count % multiple)]


def build_env_managers(cfg: PipelineConfig) -> tuple[EnvManager, EnvManager | None]:
    """(training, evaluation) env managers; raises for a bad layout or env before any worker starts."""
    assert cfg.train_env_manager is not None
    tool_args = {"parse_tool_call_parameter_to_dict": cfg.parse_tool_call_parameter_to_dict}
    train = EnvManager("train_env_manager", cfg.train_env_manager, cfg.custom_envs,
                       batch_size=cfg.rollout_batch_size, seed=cfg.seed, **tool_args)
    val = (EnvManager("val_env_manager", cfg.val_env_manager, cfg.custom_envs, batch_size=cfg.val_batch_size,
                      seed=cfg.seed, **tool_args) if cfg.val_env_manager is not None else None)
    return train, val


@dataclasses.dataclass
class AgenticRollout(Rollout):
    """One played batch: its trajectories, every one played by the weights of policy `version` (the
    RLVR fields gens/responses/scores stay empty; prompt_indices are the env stream positions drawn)."""

    trajectories: list[Trajectory] = dataclasses.field(default_factory=list)

    @property
    def samples(self) -> int:
        return len(self.trajectories)

    def to_state(self) -> dict[str, Any]:
        return {**super().to_state(), "trajectories": [t.to_state() for t in self.trajectories]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> AgenticRollout:
        base = Rollout.from_state(state)
        return cls(**{f.name: getattr(base, f.name) for f in dataclasses.fields(Rollout)},
                   trajectories=[Trajectory.from_state(t) for t in state["trajectories"]])


class AgenticPipeline(RLVRPipeline):
    """The RLVR pipeline with environments in place of prompts (module docstring)."""

    rollout_type = AgenticRollout

    def __init__(self, cfg: PipelineConfig, emitter: Any, *, groups: roles.RoleGroups, tokenizer: Any,
                 train_envs: EnvManager, val_envs: EnvManager | None,
                 log: Callable[[str], None] = print) -> None:
        self.train_envs, self.val_envs = train_envs, val_envs
        # evaluation's episodes are fixed for the run; the train env manager is the loop's "sampler"
        self.val_episodes = val_envs.episodes(None) if val_envs is not None else []
        super().__init__(cfg, emitter, groups=groups, tokenizer=tokenizer, train_prompts=[],
                         eval_prompts=self.val_episodes,
                         sampler=train_envs, log=log)
        self.infer_world = len(groups["actor_infer"].call_all(roles.Role.ping))
        bounds = topology.lengths(cfg)  # ROLL's trajectory cap when the file sets sequence_length alone (decision 0055)
        self.setup = PlaySetup(self.generate_rows, tokenizer, chat_format(tokenizer), bounds.prompt,
                               bounds.response, keep_frames=cfg.render_save_dir is not None,
                               sequence_length=bounds.trajectory_cap)
        tags = sorted({*train_envs.tags, *(val_envs.tags if val_envs is not None else ())})
        self.tag_ids = {tag: i for i, tag in enumerate(tags)}
        self.normalization = cfg.reward_normalization
        self.row_multiple: int | None = None  # step-wise batches: rows a multiple of this (step_rows)

    def generate_rows(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One generation per prompt through actor_infer, in order; the batch is padded with copies of its
        first prompt to a multiple of the engine ranks (call_sharded splits evenly) and cut back."""
        fill = -len(prompts) % self.infer_world
        gens = self.generate([{"input_ids": ids} for ids in prompts + [prompts[0]] * fill], params)
        return gens[: len(prompts)]

    def play_episodes(self, envs: EnvManager, episodes: list[Episode], params: SamplingParams,
                      seed: int) -> list[Trajectory]:
        return play(self.setup, envs, episodes, params, lambda turn, budget: derive_seed(seed, turn, budget))

    # -- one step -------------------------------------------------------------------------------
    # train_step (sync) and async_step (one_step_off) are RLVRPipeline's: batch j's episodes are played by
    # `collect` (in the producer thread when rollout_mode is one_step_off), trained by `learn`.
    def collect(self, batch_id: int, prompt_indices: list[int], version: int) -> Rollout:
        """Play batch `batch_id`'s episodes with the engine's weights (policy `version`), seeded by the batch."""
        cfg = self.cfg
        started = time.perf_counter()
        params = sampling_params(cfg, cfg.actor_infer, n=1, seed=0)  # each turn's call has its own seed
        with self.watch("generate"):
            trajectories = self.play_episodes(self.train_envs, self.train_envs.episodes(batch_id), params,
                                              seed=sampling_seed(cfg, cfg.actor_infer) * 1_000_003 + batch_id)
        return AgenticRollout(batch_id, list(prompt_indices), version, [], [], torch.zeros(0),
                              generate_s=time.perf_counter() - started, trajectories=trajectories)

    def learn(self, step: int, rollout: Rollout, timer: Timer) -> dict[str, float]:
        """The played batch's trajectories through the learner; each row's staleness is the versions between the
        policy that played it and this update (one_step_off: at most 1)."""
        assert isinstance(rollout, AgenticRollout)
        cfg, trajectories = self.cfg, rollout.trajectories
        metrics: dict[str, float] = {}
        timer.values["timing/generate"] = rollout.generate_s
        raw = torch.tensor([t.score for t in trajectories])
        state_ids = torch.tensor([t.episode.state_id for t in trajectories])
        tag_ids = torch.tensor([self.tag_ids[t.episode.tag] for t in trajectories])
        if self.normalization is not None:
            groups = normalization_groups(self.normalization.grouping, state_ids=state_ids, tag_ids=tag_ids)
            norm = self.normalization
            scores = normalize_scores(raw, groups, norm.method, norm.norm_mean_type, norm.norm_std_type)
        else:
            scores = raw
        turn_scores = (self.turn_scores(trajectories, state_ids, tag_ids, metrics)
                       if cfg.adv_estimator in step_algos.TURN_SCORE_ESTIMATORS else None)
        if self.train_envs.step_wise:
            rows = self.step_rows(trajectories)
            metrics["system/batch_add_count"] = float(len(rows) - len(step_rows(trajectories)))
            batch = step_batch(trajectories, self.tokenizer.pad_token_id)
            batch = {key: value[torch.tensor([r for r, _, _ in rows])] for key, value in batch.items()}
            mask = batch["response_mask"]
            owner = torch.tensor([i for _, i, _ in rows])
            row_scores, groups_of_rows = scores[owner], state_ids[owner]
            # a step row is one turn: its tokens are turn 0 of the row, its value that turn's
            turn_ids = torch.where(mask > 0, 0, -1) if cfg.adv_estimator in step_algos.STEP_ADV_ESTIMATORS else None
            if turn_scores is not None:
                turn_scores = turn_scores[owner, torch.tensor([k for _, _, k in rows])].unsqueeze(1)
            steps = [trajectories[i].steps[k] for _, i, k in rows]
            engine_log_probs = padded([s.logprobs for s in steps], mask.size(1))
            prompt_lengths = torch.tensor([len(s.prompt_ids) for s in steps])
            truncated = torch.tensor([trajectories[i].done_reason == "max_length" for _, i, _ in rows])
        else:
            # rows 0..n-1 are the trajectories in order, then the copies that fill whole optimizer steps
            owner = torch.tensor(self.adjusted_rows(len(trajectories)))
            metrics["system/batch_add_count"] = float(len(owner) - len(trajectories))
            batch = {key: value[owner]
                     for key, value in trajectory_batch(trajectories, self.tokenizer.pad_token_id).items()}
            mask = batch["response_mask"]
            row_scores, groups_of_rows = scores[owner], state_ids[owner]
            turn_ids = (turn_index(trajectories, mask.size(1))[owner]
                        if cfg.adv_estimator in step_algos.STEP_ADV_ESTIMATORS else None)
            if turn_scores is not None:
                turn_scores = turn_scores[owner]
            engine_log_probs = padded([t.logprobs for t in trajectories], mask.size(1))[owner]
            prompt_lengths = torch.tensor([len(t.prompt_ids) for t in trajectories])[owner]
            truncated = torch.tensor([t.done_reason == "max_length" for t in trajectories])[owner]
            # the health checks link the trajectories cut at max_length; no tokens: replies repeat their action
            # format turn after turn, which is no loop
            self.step_samples = [SampleFacts(t.episode.state_id, t.episode.sample_index,
                                             "length" if t.done_reason == "max_length" else t.done_reason or "", ())
                                 for t in trajectories]
        staleness = torch.full((len(owner),), step - 1 - rollout.version, dtype=torch.long)
        result = self.learner.learn(step, RolloutBatch(batch, row_scores, groups_of_rows, engine_log_probs,
                                                       staleness=staleness,
                                                       turn_ids=turn_ids, turn_scores=turn_scores), timer)
        metrics.update(result.metrics)
        metrics.update(data_metrics(
            scores=raw[owner], token_rewards=result.token_rewards, advantages=result.advantages, response_mask=mask,
            prompt_lengths=prompt_lengths, max_prompt_length=self.setup.prompt_length, truncated=truncated,
            values=result.values, returns=result.returns,
        ))
        metrics.update(env_metrics(trajectories, "env"))
        if self.train_envs.step_wise:
            metrics["env/step_rows"] = float(len(owner))
            self.emit_steps(step, trajectories, rows, result.advantages, rollout.version)
        else:
            self.emit_trajectories(step, trajectories, result.advantages, self.trainer_log_probs(result.old_log_probs),
                                   rollout.version)
        self.ledger.record("train", batch=rollout.batch_id, step=step, version=rollout.version,
                           staleness=int(staleness.max()), samples=len(owner))
        return metrics

    def rows_multiple(self) -> int:
        """The row count every training batch is padded to a multiple of: lcm of every training role's
        global batch (per_device_train_batch_size × gradient_accumulation_steps × dp) and the sharded roles'
        rank counts (ROLL's adjust_batch size_divide, agentic_pipeline.py:680-699)."""
        if self.row_multiple is None:
            multiple = 1
            for role in topology.TRAINING_ROLES:
                if role in self.groups:
                    multiple = math.lcm(multiple, topology.train_shape(self.cfg, role).global_batch)
            for role in ("reference", *topology.TRAINING_ROLES):  # the sharded roles
                if role in self.groups:
                    multiple = math.lcm(multiple, len(roles.group_named(self.groups, role).call_all(roles.Role.ping)))
            self.row_multiple = multiple
        return self.row_multiple

    def adjusted_rows(self, count: int) -> list[int]:
        """padded_rows to rows_multiple under batch_adjust_mode: copy is the mode built; validation refuses the
        others where a batch needs adjusting, and a config that skipped validation is stopped here, not trained
        on copies it did not ask for."""
        rows = padded_rows(count, self.rows_multiple())
        if len(rows) > count and self.cfg.batch_adjust_mode != "copy":
            raise ValueError(f"batch_adjust_mode: {self.cfg.batch_adjust_mode!r} is not built; {count} rows need "
                             f"{len(rows) - count} more to fill whole optimizer steps: override batch_adjust_mode=copy")
        return rows

    def step_rows(self, trajectories: list[Trajectory]) -> list[tuple[int, int, int]]:
        """(row of step_batch, trajectory, reply) of each training row of a step-wise batch: every reply, then
        copies (padded_rows) until the rows fill whole optimizer steps of every training role and split
        evenly over the sharded roles' ranks."""
        real = [(r, i, k) for r, (i, k) in enumerate(step_rows(trajectories))]
        return [real[j] for j in self.adjusted_rows(len(real))]

    def turn_scores(self, trajectories: list[Trajectory], state_ids: torch.Tensor, tag_ids: torch.Tensor,
                    metrics: dict[str, float]) -> torch.Tensor:
        """Each turn's value [batch, turns] for gigpo / step_reinforce (trainer.algorithms.step_advantages):
        step returns of the turns' rewards plus format penalties (step_reward_gamma), normalised with
        reward_normalization's grouping and pair (norm_mean_type / norm_std_type, unset ones from method; unset
        section: identity); gigpo adds the episode term and
        compares turns that answered the same observation within one start-state group. Records ROLL's
        system/state_batch_size/{max,mean,min} (turns per anchor group) for gigpo."""
        cfg = self.cfg
        turns = max(t.replies for t in trajectories)
        turn_mask = padded([[1] * t.replies for t in trajectories], turns).bool()
        returns = step_algos.step_returns(padded([t.step_scores for t in trajectories], turns), turn_mask,
                                          cfg.step_reward_gamma)
        norm = self.normalization
        grouping, method = (norm.grouping, norm.method) if norm is not None else ("state", "identity")
        mean_type, std_type = (norm.norm_mean_type, norm.norm_std_type) if norm is not None else (None, None)
        groups = normalization_groups(grouping, state_ids=state_ids, tag_ids=tag_ids)
        if cfg.adv_estimator == "step_reinforce":
            return step_algos.step_reinforce(returns, turn_mask, groups, method, mean_type, std_type)
        observation_ids: dict[str, int] = {}
        anchors = torch.full((len(trajectories), turns), -1, dtype=torch.long)
        for i, t in enumerate(trajectories):
            assert len(t.observations) == t.replies, "one observation per reply"
            for k, observation in enumerate(t.observations):
                anchors[i, k] = observation_ids.setdefault(observation, len(observation_ids))
        anchor_groups = step_algos.anchor_groups(state_ids, anchors)
        _, sizes = torch.unique(anchor_groups[turn_mask], return_counts=True)
        metrics.update({"system/state_batch_size/max": float(sizes.max()),
                        "system/state_batch_size/mean": float(sizes.float().mean()),
                        "system/state_batch_size/min": float(sizes.min())})
        scores = torch.tensor([t.score for t in trajectories])
        return step_algos.gigpo(scores, returns, turn_mask, groups, anchor_groups, method,
                                cfg.episode_reward_weight, cfg.step_reward_weight, mean_type, std_type).advantages

    def emit_steps(self, step: int, trajectories: list[Trajectory], rows: list[tuple[int, int, int]],
                   advantages: torch.Tensor, version: int) -> None:
        """Step-wise batches: the first `logged_rollout_samples` trajectories as `rollouts` samples, each the
        prompt of its first turn and its replies one after another, with each reply's own advantages."""
        first_row = {(i, k): row for row, (_, i, k) in enumerate(rows)}
        samples = []
        for i, t in enumerate(trajectories[: self.cfg.logged_rollout_samples]):
            tokens = [token for s in t.steps for token in s.response_ids]
            token_advantages = [round(float(a), 5) for k, s in enumerate(t.steps)
                                for a in advantages[first_row[(i, k)], : len(s.response_ids)]]
            samples.append({
                "prompt": self.tokenizer.decode(t.steps[0].prompt_ids) if t.steps else "",
                "response": self.tokenizer.decode(tokens), "reward": t.score,
                "advantage": sum(token_advantages) / len(token_advantages) if token_advantages else 0.0,
                "prompt_length": len(t.steps[0].prompt_ids) if t.steps else 0, "response_length": len(tokens),
                "stop_reason": t.done_reason, "group_id": t.episode.state_id, "sample_index": t.episode.sample_index,
                "tokens": self.tokenizer.convert_ids_to_tokens(tokens),
                "token_logprobs": [round(x, 5) for s in t.steps for x in s.logprobs],
                "token_advantages": token_advantages, "token_mask": [1] * len(tokens), "env_tag": t.episode.tag,
                "success": t.success, "num_turns": t.replies, "done_reason": t.done_reason, "turns": t.turns,
                "policy_version": version,
            })
        self.emitter.rollouts(samples, step=step)

    def progress_line(self, metrics: dict[str, float]) -> str:
        line = super().progress_line(metrics)
        return f"{line} | success {metrics['env/success']:.2f}" if "env/success" in metrics else line

    # -- evaluation -----------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """val_env_manager's fixed episodes; greedy when val_greedy is set or `validation` sets no
        sampling."""
        cfg, section = self.cfg, self.cfg.validation
        assert self.val_envs is not None
        greedy = cfg.val_greedy or section is None or section.generating_args is None
        # a turn's token budget is the training one (max_tokens_per_step, else actor_infer's max_new_tokens)
        budget = sampling_params(cfg, cfg.actor_infer, n=1, seed=0).max_new_tokens
        params = dataclasses.replace(sampling_params(cfg, section, n=1, seed=0, greedy=greedy),
                                     max_new_tokens=budget)
        with self.engine_session():
            trajectories = self.play_episodes(self.val_envs, self.val_episodes, params,
                                              seed=sampling_seed(cfg, section))
        scores = torch.tensor([t.score for t in trajectories])
        return {"eval/reward/mean": float(scores.mean()), "eval/num_samples": float(len(trajectories)),
                **env_metrics(trajectories, "eval")}

    # -- telemetry ------------------------------------------------------------------------------
    def emit_trajectories(self, step: int, trajectories: list[Trajectory], advantages: torch.Tensor,
                          trainer_log_probs: torch.Tensor | None, version: int, count: int | None = None) -> None:
        """The first `logged_rollout_samples` trajectories (whole groups first) as `rollouts` samples, each
        with its turns and per-token arrays aligned with `tokens` (token_mask: 1 where the loss applies;
        token_logprobs the engine's, token_logprobs_trainer actor_train's where it computed them); their
        frames go to render_save_dir/step_<k>/ when it is set; `count` of them (None: logged_rollout_samples)."""
        samples = []
        for row, t in enumerate(trajectories[: self.cfg.logged_rollout_samples if count is None else count]):
            mask = torch.tensor(t.loss_mask, dtype=torch.bool)
            token_advantages = advantages[row, : len(t.response_ids)]
            sample = {
                "prompt": self.tokenizer.decode(t.prompt_ids),
                "response": self.tokenizer.decode(t.response_ids),
                "reward": t.score,
                "advantage": float(token_advantages[mask].mean()) if bool(mask.any()) else 0.0,
                "prompt_length": len(t.prompt_ids),
                "response_length": len(t.response_ids),
                "stop_reason": t.done_reason,
                "group_id": t.episode.state_id,
                "sample_index": t.episode.sample_index,
                "tokens": self.tokenizer.convert_ids_to_tokens(t.response_ids),
                "token_logprobs": [round(x, 5) for x in t.logprobs],
                "token_advantages": [round(float(x), 5) for x in token_advantages],
                "token_mask": t.loss_mask,
                "env_tag": t.episode.tag,
                "success": t.success,
                "num_turns": t.replies,
                "done_reason": t.done_reason,
                "turns": t.turns,
                "policy_version": version,  # the training steps behind the weights that played it
            }
            if trainer_log_probs is not None:
                sample["token_logprobs_trainer"] = [round(x, 5) for x in trainer_log_probs[row, : len(t.response_ids)].tolist()]
            if self.cfg.render_save_dir is not None:
                sample["render_path"] = str(self.write_frames(step, t))
            samples.append(sample)
        self.emitter.rollouts(samples, step=step)

    def write_frames(self, step: int, t: Trajectory) -> Path:
        """render_save_dir/step_<k>/<state>_<k>_<tag>.txt: the text frames after reset and each reply."""
        assert self.cfg.render_save_dir is not None
        name = f"{t.episode.state_id}_{t.episode.sample_index}_{t.episode.tag}.txt"
        path = Path(self.cfg.render_save_dir) / f"step_{step}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        labels = ["reset", *(f"after reply {k}" for k in range(1, len(t.frames)))]
        frames = zip(labels, t.frames, strict=True)
        path.write_text("".join(f"# {label}\n{frame}\n\n" for label, frame in frames))
        return path


def score_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """ROLL's rollout-only metrics before their val/ prefix (agentic_rollout_pipeline.py:80-94): the trajectory
    scores' score/{mean,max,min} over the batch and <tag>/score/{mean,max,min} per env tag."""
    def stats(prefix: str, scores: list[float]) -> dict[str, float]:
        return {f"{prefix}score/mean": sum(scores) / len(scores), f"{prefix}score/max": max(scores),
                f"{prefix}score/min": min(scores)}

    metrics = stats("", [t.score for t in trajectories])
    for tag in sorted({t.episode.tag for t in trajectories}):
        metrics.update(stats(f"{tag}/", [t.score for t in trajectories if t.episode.tag == tag]))
    return metrics


class AgenticRolloutPipeline(AgenticPipeline):
    """ROLL's AgenticRolloutPipeline (pipeline_mode rollout_only, decision 0062): each step `collect` plays
    rollout_batch_size trajectories with actor_infer; their scores (score_metrics) and env metrics are logged
    under val/ with system/samples, and every trajectory is recorded as a `rollouts` sample (ROLL:
    dump_rollout_trajectories). No learner, no weight sync, no checkpoint: nothing trains."""

    def learn(self, step: int, rollout: Rollout, timer: Timer) -> dict[str, float]:
        assert isinstance(rollout, AgenticRollout)
        trajectories = rollout.trajectories
        played = {**score_metrics(trajectories), **env_metrics(trajectories, "env")}
        metrics = {f"val/{name}": value for name, value in played.items()}
        metrics["system/samples"] = float(step * len(trajectories))
        metrics["timing/generate"] = rollout.generate_s
        width = max((len(t.response_ids) for t in trajectories), default=0)
        self.emit_trajectories(step, trajectories, torch.zeros(len(trajectories), width), None, rollout.version,
                               count=len(trajectories))
        return metrics

    def progress_line(self, metrics: dict[str, float]) -> str:
        """The step, the played batch's mean score and success (no reward/mean: nothing is trained on)."""
        eta = int(self.eta())
        return (f"step {self.step}/{self.cfg.max_steps} | rollout-only | score {metrics['val/score/mean']:.3f} | "
                f"success {metrics['val/env/success']:.2f} | {self.step_times[-1]:.2f} s/step | "
                f"ETA {eta // 60}m{eta % 60:02d}s")

    def sync_weights(self) -> None:
        """Nothing trains: the engine keeps the weights it loaded."""

    def save_checkpoint(self) -> None:
        """No weight checkpoint: the policy never changes (ROLL's rollout pipeline saves none either)."""
