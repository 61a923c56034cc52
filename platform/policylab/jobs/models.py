"""Bookkeeping the supervisor keeps per attempt, next to experiments.RunAttempt."""

from __future__ import annotations

import secrets

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


class DatabaseToken(models.Model):
    """A random token made once per database (one row, pk 1). Ray submission ids carry it: ids start again
    at 1 when the database is reset while the Ray head lives on, and `policylab-run1-a1` of the new
    database must not be mistaken for the old database's job of that name."""

    token = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.token


def database_token() -> str:
    """This database's token, made on first use (a database that was flushed gets a new one)."""
    row, _ = DatabaseToken.objects.get_or_create(pk=1, defaults={"token": secrets.token_hex(4)})
    return row.token
