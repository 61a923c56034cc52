"""Experiment and run services: the only code that creates or changes experiments and runs.

Views and API endpoints call these after fetching objects through accounts.scoping; every config
goes through trainer.config.validate_config, and nothing is saved when it reports an error.
Resume semantics are recorded in docs/decisions/0002-resume-and-fork.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from policylab.accounts.models import Team
from policylab.accounts.scoping import require_admin, require_write
from policylab.experiments import statuses
from policylab.experiments.models import Experiment, Project, Run
from policylab.experiments.quotas import Quotas, concurrency_refusal, config_quota_issues
from policylab.experiments.run_state import write_run_state
from policylab.redaction import hide_server_paths
from policylab.tracking.compare import effective_config
from trainer.config import (
    ConfigError,
    ConfigIssue,
    ValidationResult,
    config_to_yaml,
    load_raw,
    validate_config,
)
from trainer.config.confinement import PathPolicy, check_confinement
from trainer.config.importers import detect_format

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


class QuotaExceeded(ValidationFailed):
    """The team already has as many live runs as this deployment allows (API answers 429)."""

    def __init__(self, message: str) -> None:
        super().__init__([issue("", message)])
        self.args = (message,)


def canonical_hash(config: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON text of `config` (sorted keys, no whitespace)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def issue(path: str, message: str) -> ConfigIssue:
    return ConfigIssue(path=path, message=message, severity="error")


def path_policy(run_dir: Path | None = None) -> PathPolicy:
    """What runs may touch in this deployment: files under settings.POLICYLAB_READ_ROOTS and the run dir,
    URLs under POLICYLAB_URL_PREFIXES, and the system_envs POLICYLAB_SYSTEM_ENVS_ALLOW adds."""
    return PathPolicy(
        tuple(settings.POLICYLAB_READ_ROOTS), settings.POLICYLAB_TRAINER_WORKDIR, str(run_dir) if run_dir else None,
        tuple(settings.POLICYLAB_URL_PREFIXES), tuple(settings.POLICYLAB_SYSTEM_ENVS_ALLOW),
    )


def validate_on_platform(
    source: str | Mapping[str, Any], overrides: Sequence[str] = (), source_format: str = "auto"
) -> ValidationResult:
    """validate_config (YAML text or a mapping, never a file; `${oc.env:…}` kept as written), plus
    the platform's own rules: every path a run would read or write is confined by path_policy(), and
    its steps and samples per step stay within the deployment's quotas."""
    result = validate_config(source, overrides=list(overrides), source_format=source_format)
    if result.config is not None:
        result.errors += check_confinement(result.config, path_policy())
        result.errors += config_quota_issues(result.config, Quotas.from_settings())
    # the deployment's folders as users write them (relative to the trainer's working directory)
    result.errors = [replace(i, message=hide_server_paths(i.message)) for i in result.errors]
    result.warnings = [replace(i, message=hide_server_paths(i.message)) for i in result.warnings]
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
    # Hydra's forms, as the trainer CLI takes them: key=value, +key=value, ~key and ~key=value.
    bad = [o for o in overrides if not isinstance(o, str) or ("=" not in o and not o.startswith("~"))]
    if bad:
        raise ValidationFailed([issue("overrides", f"each override must be 'key=value' or '~key', got {bad[0]!r}")])
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
    imported: str = "",
) -> Experiment:
    """Validate `source` (YAML text or a mapping, in any supported format) and save an immutable
    snapshot of the native config. Raises ValidationFailed (and saves nothing) when invalid.

    The file as submitted is kept beside the native config (`source_text`, `source_format`): `source` itself
    when it is text, else `imported`, the foreign file the editor's form was filled from."""
    require_write(user, project.team)
    if not name or not name.strip():
        raise ValidationFailed([issue("name", "an experiment needs a name")])
    result = check_config(source, overrides, source_format)
    config = result.config.model_dump(mode="json")
    if isinstance(source, str):
        original, original_format = source, result.source_format
    elif imported.strip():
        original, original_format = imported, file_format(imported)
    else:
        original, original_format = "", result.source_format
    return Experiment.objects.create(
        project=project,
        name=name.strip(),
        description=description,
        tags=[str(t) for t in tags],
        config=config,
        config_yaml=config_to_yaml(result.config),
        config_hash=canonical_hash(config),
        source_format=original_format,
        source_text=original,
        created_by=user,
    )


def file_format(text: str) -> str:
    """The format (roll, verl, skyrl, rlinf) a config file's top-level keys say, or "unknown"."""
    try:
        fmt, _ = detect_format(load_raw(text))
    except (ConfigError, ValueError, TypeError):  # not YAML, past a bound, or not a mapping
        return "unknown"
    return fmt or "unknown"


def jobs_services():
    """The jobs app's service module (imported late: it pulls in Celery)."""
    from policylab.jobs import services

    return services


def launch_run(experiment: Experiment, user, overrides: Sequence[str] | Mapping[str, Any] | None = None) -> Run:
    """Create a queued Run of `experiment` and hand it to the jobs app for supervision. The config is
    checked again: the deployment's confinement and quotas may have changed since it was saved."""
    team = experiment.project.team
    require_write(user, team)
    dotlist = normalise_overrides(overrides)
    check_config(experiment.config, dotlist)
    with transaction.atomic():
        take_run_slot(team)
        run = Run.objects.create(experiment=experiment, created_by=user, overrides=dotlist)
        jobs_services().launch_run(run)  # enqueues supervision once the transaction commits
    return run


def take_run_slot(team: Team) -> None:
    """Raise QuotaExceeded when `team` already has as many live runs as the deployment allows. Call it in
    the transaction that creates or requeues the run: the team's row stays locked until that commits, so
    two submissions never both take the last slot."""
    Team.objects.select_for_update().only("pk").get(pk=team.pk)
    live = Run.objects.filter(experiment__project__team=team, status__in=statuses.ACTIVE).count()
    refusal = concurrency_refusal(team.name, live, Quotas.from_settings())
    if refusal:
        raise QuotaExceeded(refusal)


@dataclass(frozen=True)
class CancelOutcome:
    run: Run  # as it is now
    requested: bool  # this call requested the cancel; False: the run was already cancelling or cancelled


def cancel_run(run: Run, user) -> CancelOutcome:
    """Cancel a live run; idempotent: a run already cancelling or cancelled is answered as it is.
    A run that ended otherwise raises RunStateError (there is nothing to cancel)."""
    require_write(user, run.experiment.project.team)
    if jobs_services().cancel_run(run):  # flags it `cancelling`; stops the Ray job after commit
        return CancelOutcome(run, requested=True)
    if run.status in (statuses.CANCELLING, statuses.CANCELLED):
        return CancelOutcome(run, requested=False)
    raise RunStateError(f"run {run.pk} already {run.status}; there is nothing to cancel")


def checkpoints_of(run: Run):
    from policylab.tracking.models import Checkpoint

    return Checkpoint.objects.filter(run=run).order_by("-step", "-pk")


def describe(checkpoint) -> str:
    return f"checkpoint {checkpoint.pk} (step {checkpoint.step})"


def resolve_checkpoint(run: Run, checkpoint: Any):
    """A resumable Checkpoint of `run` given its id or "latest" (its newest resumable one); raises
    ValidationFailed naming `checkpoint` when there is none, or when the one named was pruned by
    retention (max_ckpts_to_keep) or is gone from disk."""
    checkpoints = checkpoints_of(run)
    resumable = [c for c in checkpoints if c.resumable]
    if checkpoint in (None, "", LATEST):
        if not resumable:
            gone = " (every checkpoint it saved was pruned or is gone from disk)" if checkpoints.exists() else " yet"
            raise ValidationFailed([issue("checkpoint", f"run {run.pk} has no resumable checkpoint{gone}")])
        return resumable[0]
    try:
        found = checkpoints.get(pk=int(checkpoint))
    except (TypeError, ValueError):
        raise ValidationFailed([issue("checkpoint", f'expected a checkpoint id or "latest", got {checkpoint!r}')]) from None
    except checkpoints.model.DoesNotExist:
        raise ValidationFailed([issue("checkpoint", f"run {run.pk} has no checkpoint {checkpoint}")]) from None
    if not found.resumable:
        why = "was deleted by retention (max_ckpts_to_keep)" if found.deleted_at else "is gone from disk"
        offer = ", ".join(describe(c) for c in resumable) or "none"
        raise ValidationFailed([issue("checkpoint", f"{describe(found)} of run {run.pk} {why}; resumable: {offer}")])
    return found


def resume_refusal(run: Run, target: Any = None, latest: Any = None) -> str | None:
    """Why `run` cannot be resumed (from `target`, when its latest resumable checkpoint is `latest`)."""
    if run.status == statuses.CANCELLING:
        return f"run {run.pk} is cancelling; resume it once it is cancelled"
    if run.status not in statuses.RESUME_FROM:
        return f"run {run.pk} is {run.status}; only failed, cancelled or succeeded runs can be resumed"
    active = run.attempts.filter(status__in=statuses.ACTIVE).order_by("-number").first()
    if active is not None:
        return f"run {run.pk}: attempt {active.number} is still {active.status} on Ray; resume it once it has stopped"
    max_steps = effective_config(run.experiment.config, run.overrides).get("max_steps")
    continues = target is not None and latest is not None and target.pk == latest.pk
    if continues and isinstance(max_steps, int) and target.step >= max_steps:
        return (f"run {run.pk} already finished all its {max_steps} steps ({describe(target)}); resuming would "
                "train nothing: fork it with a larger max_steps instead")
    return None


def resume_run(run: Run, user, checkpoint: Any = LATEST) -> Run:
    """Resume a finished run from a checkpoint (docs/decisions/0002-resume-and-fork.md).

    From its LATEST resumable checkpoint: the same run continues as a new attempt (one unbroken
    curve). From an EARLIER checkpoint: a new child run of the same experiment (parent_run and
    parent_checkpoint set), because continuing in place would overwrite the steps already logged.
    Refused (RunStateError) while the run is live or cancelling, and when it would train nothing.
    """
    require_write(user, run.experiment.project.team)
    if run.status not in statuses.RESUME_FROM:
        raise RunStateError(resume_refusal(run))
    target = resolve_checkpoint(run, checkpoint)
    latest = resolve_checkpoint(run, LATEST)
    refusal = resume_refusal(run, target, latest)
    if refusal:
        raise RunStateError(refusal)
    with transaction.atomic():
        take_run_slot(run.experiment.project.team)
        if target.pk == latest.pk:
            resumed = run
            continued = write_run_state(
                run.pk, only_if=Q(status__in=statuses.RESUME_FROM),
                status=statuses.QUEUED, resume_from=target.path, cancel_requested=False, finished_at=None,
                eta_seconds=None, message=f"resumed from step {target.step}",
            )
            if not continued:  # another request changed the run since it was read
                run.refresh_from_db()
                raise RunStateError(f"run {run.pk} is {run.status} now; it was not resumed")
            resumed.refresh_from_db()
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
    starts from the resumable `checkpoint` of `run`, linked by parent_run and parent_checkpoint."""
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
        take_run_slot(experiment.project.team)
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


def archive_run(run: Run, user) -> None:
    """Soft-delete a finished run (team admins): hidden from every list and page, 404 afterwards; its
    rows and files stay. A live run must be cancelled first."""
    require_admin(user, run.experiment.project.team)
    if run.is_active:
        raise RunStateError(f"run {run.pk} is {run.status}; cancel it (and let it stop) before deleting it")
    Run.objects.filter(pk=run.pk).update(archived_at=timezone.now(), archived_by=user)


def archive_experiment(experiment: Experiment, user) -> None:
    """Soft-delete an experiment and, with it, its runs (team admins); refused while a run is live."""
    require_admin(user, experiment.project.team)
    live = experiment.runs.filter(status__in=statuses.ACTIVE, archived_at__isnull=True).values_list("pk", flat=True)
    if live:
        raise RunStateError(f"experiment {experiment.pk} has live runs ({', '.join(map(str, live))}); "
                            "cancel them before deleting it")
    Experiment.objects.filter(pk=experiment.pk).update(archived_at=timezone.now(), archived_by=user)
