from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "policylab.experiments"
    label = "experiments"
    verbose_name = "Projects, experiments and runs"
