"""What ingest stores from a run's telemetry events (docs/decisions/0001-module-contracts.md, "Telemetry").

Every row keeps the `seq` of the event that last wrote it: a websocket client that reconnects with
`?after_seq=N` is sent exactly the rows whose seq is above N (see selectors.events_after).
Unique keys make ingest idempotent: replaying a stream or a JSONL file never duplicates a row, and a
later attempt that re-emits a step after a resume overwrites it.
"""

from __future__ import annotations

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
    response = models.TextField()
    reward = models.FloatField(null=True)
    advantage = models.FloatField(null=True)
    prompt_length = models.PositiveIntegerField(default=0)
    response_length = models.PositiveIntegerField(default=0)
    stop_reason = models.CharField(max_length=32, blank=True, default="")
    tokens = models.JSONField(null=True, blank=True)
    token_logprobs = models.JSONField(null=True, blank=True)
    token_advantages = models.JSONField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    seq = models.BigIntegerField()
    time = models.FloatField()

    class Meta:
        ordering = ["step", "group_id", "sample_index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step", "group_id", "sample_index"], name="unique_rollout_sample")
        ]
        indexes = [models.Index(fields=["run", "seq"], name="rollout_run_seq")]


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.BigIntegerField()
    path = models.CharField(max_length=1000)
    size_bytes = models.BigIntegerField(default=0)
    contents = models.JSONField(default=list, blank=True, help_text="model, optimizer, scheduler, rng, data")
    attempt = models.PositiveIntegerField(default=1)
    seq = models.BigIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="unique_checkpoint_step")]

    def __str__(self) -> str:
        return f"step {self.step} of run {self.run_id}"


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
