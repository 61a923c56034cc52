"""Experiment and run services: the only code that creates or changes experiments and runs.

Views and API endpoints call these after fetching objects through accounts.scoping; every config
goes through trainer.config.validate_config, and nothing is saved when it reports an error.
Resume semantics are recorded in docs/decisions/0002-resume-and-fork.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from policylab.accounts.scoping import require_write
from policylab.experiments.models import Experiment, Project, Run, RunStatus
from trainer.config import ConfigIssue, ValidationResult, config_to_yaml, validate_config
from trainer.config.confinement import PathPolicy, check_confinement

RESUMABLE_STATUSES = frozenset({RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.SUCCEEDED})
LATEST = "latest"


class ValidationFailed(Exception):
    """A config (or overrides) did not validate; `errors` and `warnings` are trainer ConfigIssues."""

    def __init__(self, errors: Sequence[ConfigIssue], warnings: Sequence[ConfigIssue] = ()) -> None:
        self.errors = list(errors)
        self.warnings = list(warnings)
        summary = "; ".join(f"{issue.path or '(root)'}: {issue.message}" for issue in self.errors[:5])
        super().__init__(f"invalid config: {summary}")


class RunStateError(Exception):
    """The run is in a state that does not allow the requested operation (API answers 409)."""


def canonical_hash(config: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON text of `config` (sorted keys, no whitespace)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def issue(path: str, message: str) -> ConfigIssue:
    return ConfigIssue(path=path, message=message, severity="error")


def path_policy(run_dir: Path | None = None) -> PathPolicy:
    """The files runs may touch in this deployment (settings.POLICYLAB_READ_ROOTS and the run dir)."""
    return PathPolicy(
        tuple(settings.POLICYLAB_READ_ROOTS), settings.POLICYLAB_TRAINER_WORKDIR, str(run_dir) if run_dir else None
    )


def validate_on_platform(
    source: str | Mapping[str, Any], overrides: Sequence[str] = (), source_format: str = "auto"
) -> ValidationResult:
    """validate_config (YAML text or a mapping, never a file; `${oc.env:…}` kept as written), plus
    the platform's own rule: every path a run would read or write is confined by path_policy()."""
    result = validate_config(source, overrides=list(overrides), source_format=source_format)
    if result.config is not None:
        result.errors += check_confinement(result.config, path_policy())
    return result


def check_config(
    source: str | Mapping[str, Any], overrides: Sequence[str] = (), source_format: str = "auto"
) -> ValidationResult:
    """Validate `source` for the platform; raise ValidationFailed when it has errors."""
    result = validate_on_platform(source, overrides, source_format)
    if not result.ok or result.config is None:
        raise ValidationFailed(result.errors, result.warnings)
    return result


def overrides_from_mapping(overrides: Mapping[str, Any]) -> list[str]:
    """{"a.b": 1, "c": {"d": "x"}} -> ["a.b=1", "c.d=x"] (values as JSON, which YAML reads back)."""

    def flatten(prefix: str, value: Any) -> list[str]:
        if isinstance(value, Mapping) and value:
            return [item for key, sub in value.items() for item in flatten(f"{prefix}.{key}" if prefix else str(key), sub)]
        text = value if isinstance(value, str) else json.dumps(value)
        return [f"{prefix}={text}"]

    return [item for key, value in overrides.items() for item in flatten(str(key), value)]


def normalise_overrides(overrides: Sequence[str] | Mapping[str, Any] | None) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return overrides_from_mapping(overrides)
    bad = [o for o in overrides if not isinstance(o, str) or "=" not in o]
    if bad:
        raise ValidationFailed([issue("overrides", f"each override must be 'key=value', got {bad[0]!r}")])
    return list(overrides)


def create_project(team, name: str, *, user, description: str = "") -> Project:
    require_write(user, team)
    project, _ = Project.objects.get_or_create(team=team, name=name, defaults={"description": description})
    return project


def create_experiment(
    project: Project,
    name: str,
    source: str | Mapping[str, Any],
    *,
    user,
    description: str = "",
    tags: Sequence[str] = (),
    source_format: str = "auto",
    overrides: Sequence[str] = (),
) -> Experiment:
    """Validate `source` (YAML text or a mapping, in any supported format) and save an immutable
    snapshot of the native config. Raises ValidationFailed (and saves nothing) when invalid."""
    require_write(user, project.team)
    if not name or not name.strip():
        raise ValidationFailed([issue("name", "an experiment needs a name")])
    result = check_config(source, overrides, source_format)
    config = result.config.model_dump(mode="json")
    return Experiment.objects.create(
        project=project,
        name=name.strip(),
        description=description,
        tags=[str(t) for t in tags],
        config=config,
        config_yaml=config_to_yaml(result.config),
        config_hash=canonical_hash(config),
        source_format=result.source_format,
        source_text=source if isinstance(source, str) else "",
        created_by=user,
    )


def jobs_services():
    """The jobs app's service module (imported late: it pulls in Celery)."""
    from policylab.jobs import services

    return services


def launch_run(experiment: Experiment, user, overrides: Sequence[str] | Mapping[str, Any] | None = None) -> Run:
    """Create a queued Run of `experiment` and hand it to the jobs app for supervision."""
    require_write(user, experiment.project.team)
    dotlist = normalise_overrides(overrides)
    if dotlist:
        check_config(experiment.config, dotlist)
    run = Run.objects.create(experiment=experiment, created_by=user, overrides=dotlist)
    jobs_services().launch_run(run)  # enqueues supervision once the transaction commits
    return run


def cancel_run(run: Run, user) -> Run:
    require_write(user, run.experiment.project.team)
    if run.is_terminal:
        raise RunStateError(f"run {run.pk} is already {run.status}")
    jobs_services().cancel_run(run)  # flags cancel_requested; stops the Ray job after commit
    return run


def checkpoints_of(run: Run):
    from policylab.tracking.models import Checkpoint

    return Checkpoint.objects.filter(run=run).order_by("-step", "-pk")


def resolve_checkpoint(run: Run, checkpoint: Any):
    """A Checkpoint of `run` given its id or "latest"; raises ValidationFailed naming `checkpoint`."""
    checkpoints = checkpoints_of(run)
    if checkpoint in (None, "", LATEST):
        found = checkpoints.first()
        if found is None:
            raise ValidationFailed([issue("checkpoint", f"run {run.pk} has no checkpoint yet")])
        return found
    try:
        return checkpoints.get(pk=int(checkpoint))
    except (TypeError, ValueError):
        raise ValidationFailed([issue("checkpoint", f'expected a checkpoint id or "latest", got {checkpoint!r}')]) from None
    except checkpoints.model.DoesNotExist:
        raise ValidationFailed([issue("checkpoint", f"run {run.pk} has no checkpoint {checkpoint}")]) from None


def resume_run(run: Run, user, checkpoint: Any = LATEST) -> Run:
    """Resume a finished run from a checkpoint (docs/decisions/0002-resume-and-fork.md).

    From its LATEST checkpoint: the same run continues as a new attempt (one unbroken curve).
    From an EARLIER checkpoint: a new child run of the same experiment (parent_run and
    parent_checkpoint set), because continuing in place would overwrite the steps already logged.
    """
    require_write(user, run.experiment.project.team)
    if run.status not in RESUMABLE_STATUSES:
        raise RunStateError(f"run {run.pk} is {run.status}; only failed, cancelled or succeeded runs can be resumed")
    target = resolve_checkpoint(run, checkpoint)
    latest = checkpoints_of(run).first()
    with transaction.atomic():
        if target.pk == latest.pk:
            resumed = run
            resumed.status = RunStatus.QUEUED
            resumed.resume_from = target.path
            resumed.cancel_requested = False
            resumed.finished_at = None
            resumed.message = f"resumed from step {target.step}"
            resumed.save(update_fields=["status", "resume_from", "cancel_requested", "finished_at", "message"])
        else:
            resumed = Run.objects.create(
                experiment=run.experiment,
                created_by=user,
                overrides=list(run.overrides),
                parent_run=run,
                parent_checkpoint=target,
                resume_from=target.path,
                message=f"resumed from run {run.pk} step {target.step}",
            )
        jobs_services().launch_run(resumed)
    return resumed


def fork_run(
    run: Run,
    user,
    checkpoint: Any = LATEST,
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    name: str | None = None,
) -> Run:
    """A new Experiment (the run's config with `overrides` applied, validated) and a new Run that
    starts from `checkpoint` of `run`, linked by parent_run and parent_checkpoint."""
    experiment = run.experiment
    require_write(user, experiment.project.team)
    target = resolve_checkpoint(run, checkpoint)
    dotlist = normalise_overrides(overrides)
    with transaction.atomic():
        child_experiment = create_experiment(
            experiment.project,
            name or f"{experiment.name} (fork of run {run.pk} @ step {target.step})",
            {**experiment.config},
            user=user,
            description=f"Forked from run {run.pk} at step {target.step}.",
            tags=list(experiment.tags),
            overrides=[*run.overrides, *dotlist],
        )
        child = Run.objects.create(
            experiment=child_experiment,
            created_by=user,
            parent_run=run,
            parent_checkpoint=target,
            resume_from=target.path,
            message=f"forked from run {run.pk} step {target.step}",
        )
        jobs_services().launch_run(child)
    return child

