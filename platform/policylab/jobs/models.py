"""Bookkeeping the supervisor keeps per attempt, next to experiments.RunAttempt."""

from __future__ import annotations

from django.db import models

from policylab.experiments.models import RunAttempt


class AttemptLaunch(models.Model):
    """How an attempt was started: which automatic retry it is and what the trainer was told.

    `retry` counts automatic retries within one launch (0 = the launch's first attempt), so a
    run that is resumed by hand gets a fresh retry budget while its attempt numbers keep growing.
    """

    attempt = models.OneToOneField(RunAttempt, on_delete=models.CASCADE, related_name="launch")
    retry = models.PositiveIntegerField(default=0)
    launch_resume_from = models.CharField(
        max_length=1000, blank=True, default="", help_text="Run.resume_from when this launch began"
    )
    resume_from_checkpoint = models.CharField(
        max_length=1000, blank=True, default="", help_text="What the trainer was told: false, true or a path"
    )
    entrypoint = models.TextField(blank=True, default="")
    log_lines = models.PositiveIntegerField(default=0, help_text="Ray job log lines stored as LogLine rows")

    def __str__(self) -> str:
        return f"launch of {self.attempt} (retry {self.retry})"
