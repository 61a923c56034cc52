"""What ingest stores from a run's telemetry events (docs/decisions/0001-module-contracts.md, "Telemetry").

Every row keeps the `seq` of the event that last wrote it: a websocket client that reconnects with
`?after_seq=N` is sent exactly the rows whose seq is above N (see selectors.events_after).
Unique keys make ingest idempotent: replaying a stream or a JSONL file never duplicates a row, and a
later attempt that re-emits a step after a resume overwrites it.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models

from policylab.experiments.models import Run


class IngestCursor(models.Model):
    """The largest event seq stored for a run, advanced in the same transaction as the rows."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="ingest_cursor")
    last_seq = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)


class MetricPoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_points")
    key = models.CharField(max_length=200)
    step = models.BigIntegerField()
    value = models.FloatField(null=True, help_text="null when the trainer reported NaN or ±inf")
    time = models.FloatField(help_text="Unix time of the event")
    attempt = models.PositiveIntegerField(default=1)
    seq = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key", "step"], name="unique_metric_point")]
        indexes = [models.Index(fields=["run", "seq"], name="metric_run_seq")]


class MetricSummary(models.Model):
    """One row per (run, metric key), kept by ingest with the points: the run's key list without scanning its
    points, and history's last / best columns. A point re-logged at or below `last_step` (a resumed attempt)
    makes ingest recount the key from its points, so min and max never keep an overwritten value."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_summaries")
    key = models.CharField(max_length=200)
    points = models.PositiveIntegerField(default=0)
    last_step = models.BigIntegerField()
    last_value = models.FloatField(null=True)
    min_value = models.FloatField(null=True, help_text="over finite values; null when the key has none")
    max_value = models.FloatField(null=True)
    first_time = models.FloatField(help_text="Unix time of the key's earliest point")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="unique_metric_summary")]


class SystemPoint(models.Model):
    """Host and accelerator utilisation (`system` events); several per step, so keyed by seq."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="system_points")
    key = models.CharField(max_length=200)
    step = models.BigIntegerField()
    value = models.FloatField(null=True)
    time = models.FloatField()
    attempt = models.PositiveIntegerField(default=1)
    seq = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq", "key"], name="unique_system_point")]
        indexes = [models.Index(fields=["run", "key", "time"], name="system_run_key_time")]


class RolloutSample(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="rollout_samples")
    step = models.BigIntegerField()
    group_id = models.BigIntegerField(default=0, help_text="GRPO group (the prompt); samples of a group share it")
    sample_index = models.BigIntegerField()
    prompt = models.TextField()
    prompt_hash = models.CharField(max_length=32, blank=True, default="",
                                   help_text="sha256 of the prompt (rollout_facts.prompt_hash): its samples across steps")
    response = models.TextField()
    reward = models.FloatField(null=True)
    advantage = models.FloatField(null=True)
    prompt_length = models.PositiveIntegerField(default=0)
    response_length = models.PositiveIntegerField(default=0)
    stop_reason = models.CharField(max_length=32, blank=True, default="")
    tokens = models.JSONField(null=True, blank=True)
    token_logprobs = models.JSONField(null=True, blank=True, help_text="the rollout engine's, as it sampled")
    token_logprobs_trainer = models.JSONField(null=True, blank=True, help_text="actor_train's, before the update")
    # |trainer - engine| over the trained tokens, kept by ingest (rollout_facts.mismatch_summary)
    logprob_mismatch_mean = models.FloatField(null=True, blank=True)
    logprob_mismatch_max = models.FloatField(null=True, blank=True)
    token_advantages = models.JSONField(null=True, blank=True)
    # agentic trajectories (docs/decisions/0015): the conversation turn by turn and which tokens are trained
    token_mask = models.JSONField(null=True, blank=True, help_text="1 where the loss applies, aligned with tokens")
    turns = models.JSONField(null=True, blank=True, help_text="role, text, tokens, loss, reward, penalty, action, …")
    env_tag = models.CharField(max_length=100, blank=True, default="")
    success = models.BooleanField(null=True, blank=True)
    num_turns = models.PositiveIntegerField(null=True, blank=True, help_text="the policy's replies")
    done_reason = models.CharField(max_length=32, blank=True, default="")
    render_path = models.CharField(max_length=1000, blank=True, default="", help_text="text frames in the run dir")
    attempt = models.PositiveIntegerField(default=1)
    seq = models.BigIntegerField()
    time = models.FloatField()

    class Meta:
        ordering = ["step", "group_id", "sample_index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step", "group_id", "sample_index"], name="unique_rollout_sample")
        ]
        indexes = [
            models.Index(fields=["run", "seq"], name="rollout_run_seq"),
            models.Index(fields=["run", "env_tag"], name="rollout_run_env_tag"),
            models.Index(fields=["run", "success"], name="rollout_run_success"),
            models.Index(fields=["run", "num_turns"], name="rollout_run_num_turns"),
            models.Index(fields=["run", "prompt_hash", "step"], name="rollout_run_prompt_step"),
            # the inspector's stop-reason list on every search (selectors.stop_reasons), read from the index alone
            models.Index(fields=["run", "stop_reason"], name="rollout_run_stop_reason"),
        ]


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.BigIntegerField()
    path = models.CharField(max_length=1000)
    size_bytes = models.BigIntegerField(default=0)
    contents = models.JSONField(default=list, blank=True, help_text="model, optimizer, scheduler, rng, data")
    attempt = models.PositiveIntegerField(default=1)
    seq = models.BigIntegerField()
    created_at = models.DateTimeField()
    deleted_at = models.DateTimeField(
        null=True, blank=True, help_text="When retention (max_ckpts_to_keep) pruned it, or it was found gone from disk"
    )

    class Meta:
        ordering = ["step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="unique_checkpoint_step")]

    def __str__(self) -> str:
        return f"step {self.step} of run {self.run_id}"

    @property
    def resumable(self) -> bool:
        """Not pruned by retention and still on disk. The trainer only ever creates `step_<k>` by renaming
        a finished save into place, so the directory existing means the checkpoint is complete."""
        return self.deleted_at is None and Path(self.path).is_dir()


class LogLine(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="log_lines")
    attempt = models.PositiveIntegerField(default=1)
    seq = models.BigIntegerField()
    line_no = models.PositiveIntegerField(help_text="Index of the line within its `log` event")
    level = models.CharField(max_length=16, default="info")
    text = models.TextField()
    time = models.FloatField()

    class Meta:
        ordering = ["seq", "line_no"]
        constraints = [models.UniqueConstraint(fields=["run", "seq", "line_no"], name="unique_log_line")]


class ChartPin(models.Model):
    """A metric chart a user pinned: shown first on every run page and on compare, whoever's run it is."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chart_pins")
    key = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="unique_chart_pin")]


class AttemptRecord(models.Model):
    """What one attempt of a run ran with and what it resumed: the trainer's `fingerprint` and `resume` events
    (one of each per attempt; a replay or a re-emit with a larger seq overwrites, an older one never does)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempt_records")
    attempt = models.PositiveIntegerField()
    fingerprint = models.JSONField(null=True, blank=True, help_text="packages, policylab, hardware, config_hash, data")
    fingerprint_seq = models.BigIntegerField(default=0)
    resume = models.JSONField(null=True, blank=True, help_text="the resume report: ok, problems, checkpoint, step, …")
    resume_seq = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["run", "attempt"]
        constraints = [models.UniqueConstraint(fields=["run", "attempt"], name="unique_attempt_record")]

    def __str__(self) -> str:
        return f"attempt {self.attempt} of run {self.run_id}"


class RunStall(models.Model):
    """A phase of a step past its watchdog bound (the trainer's `stall` events, trainer.pipeline.run.watchdog):
    which phase, how long against which bound, the worker ranks that had not answered, the stacks, and, when
    the phase ended after all, after how long. One row per `stalled` event (its seq); replays change nothing."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="stalls")
    attempt = models.PositiveIntegerField()
    seq = models.BigIntegerField(help_text="the `stalled` event's seq")
    time = models.DateTimeField()
    phase = models.CharField(max_length=64)
    summary = models.TextField()
    elapsed_s = models.FloatField(help_text="how long the phase had run when it was reported")
    bound_s = models.FloatField(null=True)
    on_stall = models.CharField(max_length=32, blank=True)
    waiting = models.JSONField(default=list, help_text='[{"role", "method", "ranks"}]: the calls not answered')
    stacks = models.TextField(blank=True)
    file = models.CharField(max_length=512, blank=True, help_text="the stall's text file in the run directory")
    recovered_after_s = models.FloatField(null=True, help_text="the phase's whole duration, when it ended after all")
    step = models.IntegerField(default=0, help_text="the `stalled` event's step")
    recovered_seq = models.BigIntegerField(null=True, help_text="the `recovered` event's seq, which closed it")
    recovered_time = models.DateTimeField(null=True, help_text="the `recovered` event's time")
    recovered_step = models.IntegerField(null=True, help_text="the `recovered` event's step")

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="unique_run_stall")]

    def __str__(self) -> str:
        return f"stall of run {self.run_id} in {self.phase} (attempt {self.attempt})"


class RunProfile(models.Model):
    """A profiler file of a run (the trainer's `profile` events, trainer.roles.profiling): a torch.profiler trace or
    a CUDA memory snapshot of one compute call of one rank at one step. Keyed by its path: a replayed event, or a
    resumed attempt that profiles the same step again (and overwrites the file), updates the one row."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="profiles")
    path = models.CharField(max_length=1000, help_text="as the trainer wrote it; served only from the run directory")
    step = models.BigIntegerField()
    role = models.CharField(max_length=32)
    rank = models.PositiveIntegerField(default=0)
    call = models.CharField(max_length=64, help_text="the role's method: train_step, compute_log_probs, …")
    kind = models.CharField(max_length=16, help_text="timeline | memory")
    format = models.CharField(max_length=32, help_text="chrome_trace_gz | cuda_memory_snapshot")
    size_bytes = models.BigIntegerField(default=0)
    attempt = models.PositiveIntegerField(default=1)
    seq = models.BigIntegerField()
    time = models.DateTimeField()

    class Meta:
        ordering = ["run", "step", "role", "rank", "call"]
        constraints = [models.UniqueConstraint(fields=["run", "path"], name="unique_run_profile_path")]

    def __str__(self) -> str:
        return f"{self.kind} of {self.role} rank {self.rank} {self.call} at step {self.step} of run {self.run_id}"


class RunAlert(models.Model):
    """A run-health check that tripped (the trainer's `alert` events, trainer.pipeline.run.health; decision 0050): at
    which step, of which kind, on which metric, its value against which threshold, and the step's samples that
    tripped it ([{"group_id", "sample_index"}], for the inspector). One row per event (its seq); replays change
    nothing."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="alerts")
    attempt = models.PositiveIntegerField(default=1)
    seq = models.BigIntegerField(help_text="the `alert` event's seq")
    step = models.BigIntegerField()
    time = models.DateTimeField()
    kind = models.CharField(max_length=32, help_text="entropy_collapse, length_cap, nan, … (ALERT_KINDS)")
    metric = models.CharField(max_length=200)
    value = models.FloatField(null=True, help_text="null: the value was NaN or infinite")
    threshold = models.FloatField(null=True)
    message = models.TextField(blank=True)
    samples = models.JSONField(default=list, help_text='[{"group_id", "sample_index"}] of the step')

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="unique_run_alert")]

    def __str__(self) -> str:
        return f"{self.kind} alert of run {self.run_id} at step {self.step}"
