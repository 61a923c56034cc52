"""Read-side queries of projects, experiments and runs, always scoped to the user's teams."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from policylab.accounts.scoping import scope_to_user
from policylab.experiments.models import Experiment, Project, Run


def projects_for(user) -> QuerySet[Project]:
    return scope_to_user(Project.objects.select_related("team"), user, "team")


def experiments_for(user) -> QuerySet[Experiment]:
    return scope_to_user(
        Experiment.objects.select_related("project__team", "created_by").annotate(run_count=Count("runs")),
        user,
        "project__team",
    )


def runs_for(user) -> QuerySet[Run]:
    return scope_to_user(
        Run.objects.select_related("experiment__project__team", "created_by", "parent_run"),
        user,
        "experiment__project__team",
    )
