"""Server-rendered pages: projects, experiments, the config editor, launching and a simple run status.

Thin views: every object comes through experiments.selectors (scoped to the user's teams, so other
teams' objects are 404) and every change through experiments.services.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST

from policylab.accounts.scoping import can_write, team_for, teams_of
from policylab.experiments import selectors, services
from policylab.experiments.config_editor import (
    FormParseError,
    build_form,
    parse_form,
    raw_values,
    validation_payload,
)
from policylab.experiments.models import Run
from policylab.redaction import shown_config_text
from trainer.config import validate_config

DEMO_CONFIG = Path(settings.REPO_ROOT) / "examples" / "demo_grpo_cpu.yaml"


def run_page_url(run: Run) -> str:
    """The tracking app's live run dashboard."""
    return reverse("tracking:run_detail", args=[run.pk])


@login_required
def home(request: HttpRequest) -> HttpResponse:
    projects = selectors.projects_for(request.user).order_by("team__name", "name")
    experiments = selectors.experiments_for(request.user)[:50]
    writable_teams = [team for team in teams_of(request.user) if can_write(request.user, team)]
    return render(
        request,
        "experiments/home.html",
        {"projects": projects, "experiments": experiments, "writable_teams": writable_teams},
    )


@login_required
@require_POST
def project_new(request: HttpRequest) -> HttpResponse:
    team = team_for(request.user, request.POST.get("team"))
    name = request.POST.get("name", "").strip()
    if team is None or not name:
        messages.error(request, "A project needs a name and one of your teams.")
        return redirect("experiments:home")
    project = services.create_project(team, name, user=request.user, description=request.POST.get("description", ""))
    return redirect("experiments:project_detail", pk=project.pk)


@login_required
def project_detail(request: HttpRequest, pk: int) -> HttpResponse:
    project = get_object_or_404(selectors.projects_for(request.user), pk=pk)
    experiments = selectors.experiments_for(request.user).filter(project=project)
    return render(
        request,
        "experiments/project_detail.html",
        {"project": project, "experiments": experiments, "can_write": can_write(request.user, project.team)},
    )


def editor_source(post: Any) -> tuple[str | dict[str, Any], str]:
    """The config the editor submitted: the YAML tab's text, or the generated form's fields."""
    if post.get("editor_mode") == "yaml":
        return post.get("config_yaml", ""), post.get("source_format", "auto") or "auto"
    return parse_form(post), "roll"


def initial_config() -> dict[str, Any]:
    """The editor starts from the demo config (every field filled, defaults included)."""
    if not DEMO_CONFIG.exists():
        return {}
    result = validate_config(DEMO_CONFIG.read_text())
    return result.config.model_dump(mode="json") if result.ok else raw_values(DEMO_CONFIG.read_text())


@login_required
def experiment_new(request: HttpRequest, pk: int) -> HttpResponse:
    project = get_object_or_404(selectors.projects_for(request.user), pk=pk)
    if not can_write(request.user, project.team):
        raise PermissionDenied("viewers cannot create experiments")
    values: dict[str, Any] = initial_config()
    issues: list = []
    warnings: list = []
    yaml_text = ""
    mode = "form"
    if request.method == "POST":
        mode = request.POST.get("editor_mode", "form")
        yaml_text = request.POST.get("config_yaml", "")
        try:
            source, source_format = editor_source(request.POST)
            experiment = services.create_experiment(
                project,
                request.POST.get("name", ""),
                source,
                user=request.user,
                description=request.POST.get("description", ""),
                tags=[t.strip() for t in request.POST.get("tags", "").split(",") if t.strip()],
                source_format=source_format,
                imported=request.POST.get("imported_source", ""),
            )
        except FormParseError as exc:
            issues, values = exc.issues, exc.partial
        except services.ValidationFailed as exc:
            issues, warnings = exc.errors, exc.warnings
            values = raw_values(source)
        else:
            messages.success(request, f"Experiment {experiment.name!r} saved.")
            return redirect("experiments:experiment_detail", pk=experiment.pk)
    form = build_form(values, issues)
    if mode == "form" and request.method == "POST":
        keep_typed_text(form, {i.path: request.POST[i.path] for i in issues if i.path in request.POST})
    return render(
        request,
        "experiments/experiment_new.html",
        {
            "project": project,
            "form": form,
            "issues": issues,
            "warnings": warnings,
            "yaml_text": yaml_text,
            "editor_mode": mode,
            "form_view": "full" if request.POST.get("form_view") == "full" else "basic",
            "imported_source": request.POST.get("imported_source", ""),
            "name_errors": [i.message for i in issues if i.path == "name"],
            "name": request.POST.get("name", ""),
            "description": request.POST.get("description", ""),
            "tags": request.POST.get("tags", ""),
        },
    )


def keep_typed_text(section, typed: dict[str, str]) -> None:
    """Show the text the user typed (not the default) in the inputs whose value did not parse."""
    for group in section.groups:
        for f in group.fields:
            if f.path in typed and f.kind != "checkbox":
                f.value = typed[f.path]
                f.kind = "text" if f.kind in ("integer", "number", "yaml") else f.kind
    for sub in section.sections:
        keep_typed_text(sub, typed)


@login_required
@require_POST
def editor_check(request: HttpRequest) -> JsonResponse:
    """Live feedback for the editor: errors by field, warnings, the launch's machine check (preflight),
    derived values and the native YAML of the current form (or YAML text). With `render_form=1` it also returns the form re-rendered from the
    YAML, which is how the YAML tab and file import update the form."""
    try:
        source, source_format = editor_source(request.POST)
    except FormParseError as exc:
        issues = [{"field": i.path, "message": i.message} for i in exc.issues]
        return JsonResponse({"ok": False, "errors": issues, "warnings": [], "derived": {}, "source_format": "roll",
                             "config": None, "yaml": None})
    payload = validation_payload(source, source_format=source_format, memory=request.POST, preflight=True)
    if request.POST.get("render_form"):
        values = payload["config"] if payload["config"] is not None else raw_values(source)
        payload["form_html"] = render_to_string(
            "experiments/_config_form.html", {"form": build_form(values)}, request=request
        )
    return JsonResponse(payload)


def refused_launch_key(experiment_pk: int) -> str:
    return f"refused-launch-{experiment_pk}"


@login_required
def experiment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The experiment page; once after a refused launch (POST-redirect-GET: the launch's POST left them in the
    session), its form as the user left it."""
    experiment = get_object_or_404(selectors.experiments_for(request.user), pk=pk)
    refused = request.session.pop(refused_launch_key(experiment.pk), None)
    if isinstance(refused, dict):
        return render_experiment(request, experiment, overrides=str(refused.get("overrides", "")),
                                 launch_errors=refused.get("errors") or [])
    return render_experiment(request, experiment)


def render_experiment(request: HttpRequest, experiment, *, overrides: str = "", launch_errors=()) -> HttpResponse:
    """The experiment page; after a refused launch, its form as the user left it: the overrides text they
    typed, the Overrides section open, and the reasons beside it."""
    runs = selectors.runs_for(request.user).filter(experiment=experiment)
    return render(
        request,
        "experiments/experiment_detail.html",
        {
            "experiment": experiment,
            "config_yaml": shown_config_text(experiment.config_yaml),
            "source_text": shown_config_text(experiment.source_text),
            "runs": [(run, run_page_url(run)) for run in runs],
            "can_write": can_write(request.user, experiment.project.team),
            "overrides": overrides,
            "launch_errors": list(launch_errors),
        },
    )


@login_required
@require_POST
def experiment_launch(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_object_or_404(selectors.experiments_for(request.user), pk=pk)
    text = request.POST.get("overrides", "")
    overrides = [line.strip() for line in text.splitlines() if line.strip()]
    try:
        run = services.launch_run(experiment, request.user, overrides)
    except services.ValidationFailed as exc:  # an invalid override, or a quota of the deployment
        # POST-redirect-GET: the page shows the overrides and the reasons once; a reload does not resubmit
        request.session[refused_launch_key(experiment.pk)] = {
            "overrides": text, "errors": [{"path": issue.path, "message": issue.message} for issue in exc.errors]}
        return redirect(f"{reverse('experiments:experiment_detail', args=[experiment.pk])}#launch-form")
    return redirect(run_page_url(run))


@login_required
@require_POST
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(selectors.runs_for(request.user), pk=pk)
    try:
        services.cancel_run(run, request.user)
    except services.RunStateError as exc:
        messages.error(request, str(exc))
    return redirect(run_page_url(run))


@login_required
@require_POST
def run_resume(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(selectors.runs_for(request.user), pk=pk)
    try:
        resumed = services.resume_run(run, request.user, request.POST.get("checkpoint", services.LATEST))
    except (services.RunStateError, services.ValidationFailed) as exc:
        messages.error(request, str(exc))
        return redirect(run_page_url(run))
    return redirect(run_page_url(resumed))


@login_required
@require_POST
def run_fork(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(selectors.runs_for(request.user), pk=pk)
    overrides = [line.strip() for line in request.POST.get("overrides", "").splitlines() if line.strip()]
    try:
        child = services.fork_run(run, request.user, request.POST.get("checkpoint", services.LATEST), overrides)
    except services.ValidationFailed as exc:
        messages.error(request, str(exc))
        return redirect(run_page_url(run))
    return redirect(run_page_url(child))
