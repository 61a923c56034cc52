from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "policylab.jobs"
    label = "jobs"
    verbose_name = "Ray job supervision"
