"""Experiment and run services: the only code that creates or changes experiments and runs.

Views and API endpoints call these after fetching objects through accounts.scoping; every config
goes through trainer.config.validate_config, and nothing is saved when it reports an error.
Resume semantics are recorded in docs/decisions/0002-resume-and-fork.md.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from policylab.accounts.models import Team
from policylab.accounts.scoping import require_admin, require_write
from policylab.accounts.team_secrets import missing_names
from policylab.experiments import statuses
from policylab.experiments.flat_config import effective_config
from policylab.experiments.models import Experiment, Project, Run
from policylab.experiments.paths import path_policy
from policylab.experiments.quotas import Quotas, concurrency_refusal, config_quota_issues
from policylab.experiments.run_state import write_run_state
from policylab.experiments.signals import run_cancel_requested, run_queued, send_on_commit
from policylab.redaction import hide_server_paths
from trainer.config import (
    ConfigError,
    ConfigIssue,
    ValidationResult,
    config_to_yaml,
    load_raw,
    validate_config,
)
from trainer.config.confinement import check_confinement, rebase_paths
from trainer.config.importers import detect_format
from trainer.config.preflight import preflight
from trainer.config.secrets import referenced_fields

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


def trainer_backend() -> str:
    """The worker backend launched trainers use: `--workers` in settings.POLICYLAB_TRAINER_ARGS, else ray."""
    args = shlex.split(settings.POLICYLAB_TRAINER_ARGS)
    for i, arg in enumerate(args):
        if arg.startswith("--workers="):
            return arg.split("=", 1)[1]
        if arg == "--workers" and i + 1 < len(args):
            return args[i + 1]
    return "ray"


def cuda_devices_here() -> int:
    """The CUDA devices this machine shows, counted without torch (the web server does not import it): the
    NVIDIA driver's device nodes, at most as many as CUDA_VISIBLE_DEVICES names."""
    count = len(glob.glob("/dev/nvidia[0-9]*"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"]))
    return count


PREFLIGHT_WHERE = "checked on the web server; the machine that runs the job may differ"


def launch_preflight(result: ValidationResult) -> list[ConfigIssue]:
    """The machine check a launched trainer runs before anything else (trainer.config.preflight, as `trainer run`
    does once the supervisor has made the config's paths absolute): the packages its tracker and strategies
    import, the CUDA devices GPU-only engines need, the model and data paths it reads. Run here, on the web
    server, for a coherent config, so the editor shows the findings before a launch fails on them; they are
    warnings: the machine that runs the job may differ. A path already refused (outside the read roots), or
    read from the environment (`${oc.env:…}`, resolved on the cluster only), is not reported again."""
    if result.config is None:
        return []
    policy = path_policy(Path(settings.POLICYLAB_RUNS_DIR) / "preflight")  # only the reads are checked
    rebased = rebase_paths(result.config.model_dump(mode="json"), result.config, policy)
    try:
        config = type(result.config).model_validate(rebased)
    except ValueError:  # a rebased path a field refuses: check the config as written
        config = result.config
    refused = {i.path for i in result.errors}
    return [
        ConfigIssue(path=i.path, message=hide_server_paths(i.message), severity="warning")
        for i in preflight(config, backend=trainer_backend(), gpus=cuda_devices_here())
        if i.path not in refused and "${oc.env:" not in i.message
    ]


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


def launch_run(experiment: Experiment, user, overrides: Sequence[str] | Mapping[str, Any] | None = None) -> Run:
    """Create a queued Run of `experiment` and hand it to the jobs app for supervision. The config is
    checked again: the deployment's confinement and quotas may have changed since it was saved."""
    team = experiment.project.team
    require_write(user, team)
    dotlist = normalise_overrides(overrides)
    result = check_config(experiment.config, dotlist)
    check_secrets_exist(team, result)
    with transaction.atomic():
        take_run_slot(team)
        run = Run.objects.create(experiment=experiment, created_by=user, overrides=dotlist)
        send_on_commit(run_queued, run.pk)  # jobs enqueues its supervision once the transaction commits
    return run


def check_secrets_exist(team: Team, result: ValidationResult) -> None:
    """Raise ValidationFailed, naming the field, the secret and the team's secrets, when the config references a
    `${secret:NAME}` the team does not have (the supervisor checks again when the trainer starts)."""
    fields = referenced_fields(result.config.model_dump(mode="json")) if result.config is not None else []
    problems = [issue(path, problem) for path, name in fields if (problem := missing_names(team, [name]))]
    if problems:
        raise ValidationFailed(problems, result.warnings)


def take_run_slot(team: Team) -> None:
    """Raise QuotaExceeded when `team` already has as many live runs as the deployment allows. Call it in
    the transaction that creates or requeues the run: the team's row stays locked until that commits, so
    two submissions never both take the last slot."""
    Team.objects.select_for_update().only("pk").get(pk=team.pk)
    live = Run.objects.filter(experiment__project__team=team, status__in=statuses.ACTIVE).count()
    refusal = concurrency_refusal(team.name, live, Quotas.from_settings())
    if refusal:
        raise QuotaExceeded(refusal)


def request_cancel(run: Run) -> bool:
    """Flag a live run and move it to `cancelling` in one compare-and-set; once that commits, jobs stops its Ray
    job (signals.run_cancel_requested) and its supervisor records `cancelled`. False (and nothing done) when the
    run is no longer cancellable: already cancelling, or finished. `run` is refreshed either way."""
    requested = write_run_state(
        run.pk, only_if=Q(status__in=statuses.CANCEL_FROM), cancel_requested=True, status=statuses.CANCELLING,
        message="cancelling: stopping the Ray job", eta_seconds=None,
    )
    if requested:
        send_on_commit(run_cancel_requested, run.pk)
    run.refresh_from_db()
    return requested


@dataclass(frozen=True)
class CancelOutcome:
    run: Run  # as it is now
    requested: bool  # this call requested the cancel; False: the run was already cancelling or cancelled


def cancel_run(run: Run, user) -> CancelOutcome:
    """Cancel a live run; idempotent: a run already cancelling or cancelled is answered as it is.
    A run that ended otherwise raises RunStateError (there is nothing to cancel)."""
    require_write(user, run.experiment.project.team)
    if request_cancel(run):
        return CancelOutcome(run, requested=True)
    if run.status in (statuses.CANCELLING, statuses.CANCELLED):
        return CancelOutcome(run, requested=False)
    raise RunStateError(f"run {run.pk} already {run.status}; there is nothing to cancel")


def checkpoints_of(run: Run):
    """The run's checkpoints, newest first. Read through Run's reverse relation (tracking.Checkpoint.run): the model
    is tracking's, and experiments does not import tracking (docs/decisions/0028-platform-apps-depend-one-way.md)."""
    return run.checkpoints.order_by("-step", "-pk")


def describe(checkpoint) -> str:
    return f"checkpoint {checkpoint.pk} (step {checkpoint.step})"


def checkpoint_at(run: Run, checkpoints, relative: str):
    """The checkpoint of `run` at `relative`, a path relative to the run directory (what the API shows as
    `resume_from`); an absolute path is refused (ValueError): the server's folders are not the caller's business."""
    if os.path.isabs(relative):
        raise ValueError(relative)
    wanted = os.path.normpath(os.path.join(str(run.run_dir), relative))
    for candidate in checkpoints:
        if os.path.normpath(candidate.path) == wanted:
            return candidate
    raise checkpoints.model.DoesNotExist(relative)


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
        found = (checkpoints.get(pk=int(checkpoint)) if not isinstance(checkpoint, str) or checkpoint.isdigit()
                 else checkpoint_at(run, checkpoints, checkpoint))
    except (TypeError, ValueError):
        raise ValidationFailed([issue("checkpoint", f'expected a checkpoint id, "latest", or its path relative to the '
                                      f"run (e.g. checkpoints/step_4), got {checkpoint!r}")]) from None
    except checkpoints.model.DoesNotExist:
        raise ValidationFailed([issue("checkpoint", f"run {run.pk} has no checkpoint {checkpoint}")]) from None
    if not found.resumable:
        why = "was deleted by retention (max_ckpts_to_keep)" if found.deleted_at else "is gone from disk"
        offer = ", ".join(describe(c) for c in resumable) or "none"
        raise ValidationFailed([issue("checkpoint", f"{describe(found)} of run {run.pk} {why}; resumable: {offer}")])
    return found


def run_refusal(run: Run) -> str | None:
    """Why `run` cannot be resumed now whatever the checkpoint: it is live, cancelling, or an attempt of it
    still runs on Ray (None: its state allows a resume)."""
    if run.status == statuses.CANCELLING:
        return f"run {run.pk} is cancelling; resume it once it is cancelled"
    if run.status not in statuses.RESUME_FROM:
        return f"run {run.pk} is {run.status}; only failed, cancelled or succeeded runs can be resumed"
    active = run.attempts.filter(status__in=statuses.ACTIVE).order_by("-number").first()
    if active is not None:
        return f"run {run.pk}: attempt {active.number} is still {active.status} on Ray; resume it once it has stopped"
    return None


@dataclass(frozen=True)
class CheckpointVerdict:
    """What one checkpoint of a run can be used for now: the run page, the API's checkpoint listing and the
    CLI show this, and resume_run / fork_run act on it, so none of them offers what the other refuses."""

    on_disk: bool  # not pruned by retention and still on disk: fork accepts it
    resumable: bool  # resume accepts it now
    reason: str = ""  # why it cannot be resumed ("" when it can)
    fork_max_steps: int | None = None  # resuming would train nothing: a fork with this max_steps trains on

    @property
    def offer(self) -> str:
        """"resume" (resume or fork), "fork" (fork only) or "none"."""
        return "resume" if self.resumable else "fork" if self.on_disk else "none"


def run_max_steps(run: Run) -> int | None:
    max_steps = effective_config(run.experiment.config, run.overrides).get("max_steps")
    return max_steps if isinstance(max_steps, int) and not isinstance(max_steps, bool) else None


def checkpoint_verdicts(run: Run, checkpoints: Sequence[Any]) -> dict[int, CheckpointVerdict]:
    """The verdict on each of `checkpoints` (Checkpoint rows of `run`), by id: the one decision of whether a
    checkpoint can be resumed, and why not. A checkpoint at or past the run's max_steps is never resumable
    (it would train nothing; fork it with a larger max_steps); one pruned or gone is neither resumable nor
    forkable; a live or cancelling run resumes nothing until it has stopped."""
    refusal = run_refusal(run) if checkpoints else None
    max_steps = run_max_steps(run) if checkpoints else None
    verdicts = {}
    for c in checkpoints:
        if not c.resumable:  # the row's own test: not pruned, and its folder on disk
            why = "was deleted by retention (max_ckpts_to_keep)" if c.deleted_at else "is gone from disk"
            verdicts[c.pk] = CheckpointVerdict(False, False, f"{describe(c)} {why}")
        elif max_steps is not None and c.step >= max_steps:
            verdicts[c.pk] = CheckpointVerdict(
                True, False,
                f"run {run.pk} already finished all its {max_steps} steps ({describe(c)}); resuming would train "
                f"nothing: fork it with a larger max_steps instead",
                fork_max_steps=c.step + max_steps,
            )
        else:
            verdicts[c.pk] = CheckpointVerdict(True, refusal is None, refusal or "")
    return verdicts


def checkpoint_verdict(run: Run, checkpoint: Any) -> CheckpointVerdict:
    return checkpoint_verdicts(run, [checkpoint])[checkpoint.pk]


def resume_run(run: Run, user, checkpoint: Any = LATEST) -> Run:
    """Resume a finished run from a checkpoint (docs/decisions/0002-resume-and-fork.md).

    From its LATEST resumable checkpoint: the same run continues as a new attempt (one unbroken
    curve). From an EARLIER checkpoint: a new child run of the same experiment (parent_run and
    parent_checkpoint set), because continuing in place would overwrite the steps already logged.
    Refused (RunStateError) with the reason checkpoint_verdict gives: the run is live or cancelling, or
    resuming would train nothing. The run shows the checkpoint's step from the start (never 0).
    """
    require_write(user, run.experiment.project.team)
    if run.status not in statuses.RESUME_FROM:
        raise RunStateError(run_refusal(run))
    target = resolve_checkpoint(run, checkpoint)
    verdict = checkpoint_verdict(run, target)
    if not verdict.resumable:
        raise RunStateError(verdict.reason)
    latest = resolve_checkpoint(run, LATEST)
    with transaction.atomic():
        take_run_slot(run.experiment.project.team)
        if target.pk == latest.pk:
            resumed = run
            continued = write_run_state(
                run.pk, only_if=Q(status__in=statuses.RESUME_FROM),
                status=statuses.QUEUED, resume_from=target.path, cancel_requested=False, finished_at=None,
                eta_seconds=None, current_step=target.step, message=f"resumed from step {target.step}",
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
                current_step=target.step,
                total_steps=run_max_steps(run),
                message=f"resumed from run {run.pk} step {target.step}",
            )
        send_on_commit(run_queued, resumed.pk)
    return resumed


def fork_run(
    run: Run,
    user,
    checkpoint: Any = LATEST,
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    name: str | None = None,
) -> Run:
    """A new Experiment (the run's config with `overrides` applied, validated) and a new Run that
    starts from the resumable `checkpoint` of `run`, linked by parent_run and parent_checkpoint.
    Refused (ValidationFailed on `max_steps`) when the fork would train nothing: the checkpoint is at or
    past the fork's max_steps."""
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
        max_steps = child_experiment.config.get("max_steps")
        if isinstance(max_steps, int) and target.step >= max_steps:
            raise ValidationFailed([issue("max_steps", (
                f"{max_steps}: the fork starts at step {target.step} and would train nothing; set a larger "
                f"max_steps, e.g. max_steps={target.step + max_steps}"))])
        take_run_slot(experiment.project.team)
        child = Run.objects.create(
            experiment=child_experiment,
            created_by=user,
            parent_run=run,
            parent_checkpoint=target,
            resume_from=target.path,
            current_step=target.step,
            total_steps=max_steps if isinstance(max_steps, int) else None,
            message=f"forked from run {run.pk} step {target.step}",
        )
        send_on_commit(run_queued, child.pk)
    return child


def archive_run(run: Run, user) -> None:
    """Soft-delete a finished run (team admins): hidden from every list and page, 404 afterwards; its
    rows and files stay. A live run must be cancelled first."""
    require_admin(user, run.experiment.project.team)
    if run.is_active:
        raise RunStateError(f"run {run.pk} is {run.status}; cancel it (and let it stop) before deleting it")
    run.archive(user)


def archive_experiment(experiment: Experiment, user) -> None:
    """Soft-delete an experiment and, with it, its runs (team admins); refused while a run is live."""
    require_admin(user, experiment.project.team)
    live = experiment.runs.filter(status__in=statuses.ACTIVE, archived_at__isnull=True).values_list("pk", flat=True)
    if live:
        raise RunStateError(f"experiment {experiment.pk} has live runs ({', '.join(map(str, live))}); "
                            "cancel them before deleting it")
    experiment.archive(user)
