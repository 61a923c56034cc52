"""Project → Experiment (immutable config snapshot) → Run → RunAttempt.

The field names other apps rely on are fixed in docs/decisions/0001-module-contracts.md.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models
from django.utils import timezone

from policylab.accounts.models import Team
from policylab.experiments import statuses


def run_dir_of(run_id: int) -> Path:
    """The run's own folder (everything it writes lives there), known from its id alone."""
    return Path(settings.POLICYLAB_RUNS_DIR) / f"run-{run_id}"


class Project(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="unique_project_name_per_team")]

    def __str__(self) -> str:
        return self.name


class SoftDeletable(models.Model):
    """Soft delete, the same for every model that has it: an archived row is hidden everywhere (404) while its
    rows and files stay; selectors filter `archived_at__isnull=True`."""

    archived_at = models.DateTimeField(null=True, blank=True, help_text="Soft-deleted: hidden everywhere (404)")
    archived_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        abstract = True

    def archive(self, user: models.Model) -> None:
        """Mark archived now by `user`, in one UPDATE of this row only (no other field is written back)."""
        type(self).objects.filter(pk=self.pk).update(archived_at=timezone.now(), archived_by=user)


class ImmutableConfigError(Exception):
    """Raised when code tries to change an experiment's config snapshot after creation."""


class Experiment(SoftDeletable):
    IMMUTABLE_FIELDS = ("config", "config_yaml", "config_hash", "source_format", "source_text")

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="experiments")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    config = models.JSONField(help_text="Native (ROLL-layout) config, resolved and validated")
    config_yaml = models.TextField()
    config_hash = models.CharField(max_length=64, db_index=True, help_text="sha256 of the canonical JSON config")
    source_format = models.CharField(max_length=16, default="roll")
    source_text = models.TextField(blank=True, default="", help_text="The file as submitted (before import)")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding and self.pk is not None:
            stored = Experiment.objects.filter(pk=self.pk).values(*self.IMMUTABLE_FIELDS).first()
            if stored is not None and any(stored[f] != getattr(self, f) for f in self.IMMUTABLE_FIELDS):
                raise ImmutableConfigError(
                    f"experiment {self.pk}: the config is immutable; fork it into a new experiment instead"
                )
        super().save(*args, **kwargs)


class RunStatus(models.TextChoices):
    QUEUED = statuses.QUEUED, "Queued"
    SUBMITTING = statuses.SUBMITTING, "Submitting"
    STARTING = statuses.STARTING, "Starting"
    RUNNING = statuses.RUNNING, "Running"
    CANCELLING = statuses.CANCELLING, "Cancelling"
    SUCCEEDED = statuses.SUCCEEDED, "Succeeded"
    FAILED = statuses.FAILED, "Failed"
    CANCELLED = statuses.CANCELLED, "Cancelled"


def default_max_retries() -> int:
    return settings.POLICYLAB_MAX_RETRIES


class Run(SoftDeletable):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    current_step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(null=True, blank=True)
    eta_seconds = models.FloatField(null=True, blank=True)
    message = models.TextField(blank=True, default="")
    parent_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="child_runs"
    )
    parent_checkpoint = models.ForeignKey(
        "tracking.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="child_runs"
    )
    resume_from = models.CharField(
        max_length=1000, blank=True, default="", help_text='"" (fresh), "latest", or a checkpoint path'
    )
    overrides = models.JSONField(default=list, blank=True, help_text='dotlist overrides, ["key=value", …]')
    max_retries = models.PositiveIntegerField(default=default_max_retries)
    cancel_requested = models.BooleanField(default=False)
    state_version = models.PositiveBigIntegerField(
        default=0, help_text="Bumped by every write of the live state (status, message, progress); pages keep the newest"
    )
    progress_attempt = models.PositiveIntegerField(
        default=0, help_text="The attempt whose trainer status events set current_step and eta_seconds"
    )

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.experiment}"

    @property
    def run_dir(self) -> Path:
        return run_dir_of(self.pk)

    @property
    def trainer_run_id(self) -> str:
        return str(self.pk)

    @property
    def is_active(self) -> bool:
        return self.status in statuses.ACTIVE

    @property
    def is_terminal(self) -> bool:
        return self.status in statuses.TERMINAL


class RunAttempt(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    ray_job_id = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    message = models.TextField(blank=True, default="")
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="unique_attempt_number")]

    def __str__(self) -> str:
        return f"attempt {self.number} of run {self.run_id}"
