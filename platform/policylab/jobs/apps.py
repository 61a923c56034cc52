from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "policylab.jobs"
    label = "jobs"
    verbose_name = "Ray job supervision"

    def ready(self) -> None:
        from policylab.experiments.signals import run_cancel_requested, run_queued
        from policylab.jobs import receivers

        run_queued.connect(receivers.supervise_queued_run, dispatch_uid="jobs.supervise_queued_run")
        run_cancel_requested.connect(receivers.stop_cancelled_run, dispatch_uid="jobs.stop_cancelled_run")
