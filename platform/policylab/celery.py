"""The Celery app: Redis broker (settings.REDIS_URL), supervision tasks from policylab.jobs.

    celery -A policylab worker --pool=threads --concurrency=8   # run from platform/
    celery -A policylab beat

Delivery is at-least-once on purpose: a task is acknowledged only after it returns
(task_acks_late), a worker takes one message at a time per slot (prefetch 1), and a message whose
worker process died is put back (task_reject_on_worker_lost). Supervision is idempotent and
exclusive (jobs.locks), so a redelivered supervise_run is harmless; the beat task reconcile_runs
hands runs whose supervisor died to a new one.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import worker_ready
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "policylab.settings")

app = Celery("policylab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    broker_url=settings.CELERY_BROKER_URL,
    result_backend=settings.CELERY_RESULT_BACKEND,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_reject_on_worker_lost=True,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    beat_schedule={
        "reconcile-runs": {
            "task": "policylab.jobs.tasks.reconcile_runs",
            "schedule": settings.POLICYLAB_RECONCILE_INTERVAL_S,
        },
    },
)
app.autodiscover_tasks()


@worker_ready.connect
def reconcile_on_start(sender: Any = None, **_: Any) -> None:
    """A (re)started worker looks for orphaned runs at once instead of waiting for beat."""
    app.send_task("policylab.jobs.tasks.reconcile_runs")
