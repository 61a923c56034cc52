from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "policylab.tracking"
    label = "tracking"
    verbose_name = "Live tracking: metrics, rollouts, checkpoints, logs"

    def ready(self) -> None:
        from policylab.experiments.signals import run_state_changed
        from policylab.tracking import broadcast
        from policylab.tracking.access import connect_signals  # open websockets follow access changes

        connect_signals()
        run_state_changed.connect(broadcast.run_state_changed, dispatch_uid="tracking.broadcast.run_state")
