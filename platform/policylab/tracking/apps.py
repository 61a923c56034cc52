from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "policylab.tracking"
    label = "tracking"
    verbose_name = "Live tracking: metrics, rollouts, checkpoints, logs"
