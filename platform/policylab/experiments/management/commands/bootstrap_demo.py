"""`python manage.py bootstrap_demo`: the demo user, team, project and experiment (idempotent).

Does not launch: scripts/run.sh launches the printed experiment id."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from policylab.accounts.models import Role, Team
from policylab.accounts.services import add_member
from policylab.experiments import services
from policylab.experiments.models import Experiment, Project

DEMO_CONFIG = Path(settings.REPO_ROOT) / "examples" / "demo_grpo_cpu.yaml"


class Command(BaseCommand):
    help = "Create (once) a demo user, team, project and the demo GRPO experiment; print the credentials."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default=os.environ.get("POLICYLAB_DEMO_USER", "demo"))
        parser.add_argument("--password", default=os.environ.get("POLICYLAB_DEMO_PASSWORD", "demo-password"))
        parser.add_argument("--config", default=str(DEMO_CONFIG), help="YAML config of the demo experiment")

    def handle(self, *args, username: str, password: str, config: str, **options) -> None:
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_password(password)
            user.save()
        team, _ = Team.objects.get_or_create(slug="demo", defaults={"name": "Demo team"})
        add_member(team, user, Role.ADMIN)
        project, _ = Project.objects.get_or_create(
            team=team, name="demo", defaults={"description": "GRPO on a tiny model and a synthetic task (CPU)."}
        )
        experiment = Experiment.objects.filter(project=project, name="demo_grpo_cpu").first()
        if experiment is None:
            try:
                experiment = services.create_experiment(
                    project, "demo_grpo_cpu", Path(config).read_text(), user=user, tags=["demo", "grpo", "cpu"]
                )
            except services.ValidationFailed as exc:
                raise CommandError(f"{config} does not validate: {exc}") from exc
        self.stdout.write(f"user: {username}")
        self.stdout.write(f"password: {password if created else '(unchanged; set when the user was created)'}")
        self.stdout.write(f"team: {team.slug} project: {project.pk} experiment: {experiment.pk}")
