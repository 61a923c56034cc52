"""Read-side queries of projects, experiments and runs, always scoped to the user's teams."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from policylab.accounts.scoping import scope_to_user
from policylab.experiments.models import Experiment, Project, Run


def projects_for(user) -> QuerySet[Project]:
    return scope_to_user(Project.objects.select_related("team"), user, "team")


def experiments_for(user) -> QuerySet[Experiment]:
    """The user's experiments; soft-deleted (archived) ones do not exist for anyone."""
    live_runs = Count("runs", filter=Q(runs__archived_at__isnull=True))
    return scope_to_user(
        Experiment.objects.filter(archived_at__isnull=True)
        .select_related("project__team", "created_by")
        .annotate(run_count=live_runs),
        user,
        "project__team",
    )


def runs_for(user) -> QuerySet[Run]:
    """The user's runs; archived runs, and the runs of archived experiments, do not exist for anyone."""
    return scope_to_user(
        Run.objects.filter(archived_at__isnull=True, experiment__archived_at__isnull=True)
        .select_related("experiment__project__team", "created_by", "parent_run"),
        user,
        "experiment__project__team",
    )
