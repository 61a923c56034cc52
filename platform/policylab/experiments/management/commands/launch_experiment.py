"""`python manage.py launch_experiment <id> [--override k=v …] [--user name]`: launch a run the way
the launch button does (experiments.services.launch_run → jobs), and print its id and page."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError
from django.urls import reverse

from policylab.experiments import services
from policylab.experiments.models import Experiment


class Command(BaseCommand):
    help = "Launch a run of an experiment (queued for the Celery supervisor) and print the run id."

    def add_arguments(self, parser) -> None:
        parser.add_argument("experiment_id", type=int)
        parser.add_argument("--override", action="append", default=[], help="dotlist override key=value (repeatable)")
        parser.add_argument("--user", help="launch as this user (default: the experiment's creator)")

    def handle(self, *args, experiment_id: int, override: list[str], user: str | None, **options) -> None:
        experiment = Experiment.objects.select_related("project__team", "created_by").filter(pk=experiment_id).first()
        if experiment is None:
            raise CommandError(f"no experiment {experiment_id}")
        launcher = get_user_model().objects.filter(username=user).first() if user else experiment.created_by
        if launcher is None:
            raise CommandError(f"no user {user!r}" if user else "the experiment has no creator; pass --user")
        try:
            run = services.launch_run(experiment, launcher, override)
        except services.ValidationFailed as exc:
            raise CommandError(str(exc)) from exc
        except PermissionDenied as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"run: {run.pk} page: {reverse('tracking:run_detail', args=[run.pk])}")
