from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "policylab.tracking"
    label = "tracking"
    verbose_name = "Live tracking: metrics, rollouts, checkpoints, logs"

    def ready(self) -> None:
        from policylab.tracking.access import connect_signals  # open websockets follow access changes

        connect_signals()
