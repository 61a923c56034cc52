"""Two launches racing for a team's last run slot: exactly one gets it (issue 45). The quota check locks
the team's row until the launch commits, which only a database with row locks shows: PostgreSQL (CI's
second platform pass, DATABASE_URL=postgres://…; see scripts/test.sh)."""

from __future__ import annotations

import contextlib
import threading

import pytest
from django.db import connection, connections

from policylab.experiments import services
from policylab.experiments.models import Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW_S = 1.5  # how long a launch that has counted the live runs waits for a rival to count too


@pytest.mark.skipif(connection.vendor != "postgresql",
                    reason="needs PostgreSQL's row locks (SQLite locks the whole file); run with DATABASE_URL")
def test_two_launches_for_the_last_slot_one_wins(settings, monkeypatch, alice, team_a, make_experiment) -> None:
    settings.POLICYLAB_QUOTA_CONCURRENT_RUNS = 2
    experiment = make_experiment(alice, team_a)
    Run.objects.create(experiment=experiment, created_by=alice, status=RunStatus.RUNNING)  # one slot left
    supervised: list[int] = []
    monkeypatch.setattr("policylab.jobs.tasks.enqueue_supervision",
                        lambda run_id, force=False: supervised.append(run_id))  # no Celery worker here

    # Widen the race: after counting the team's live runs, each launch waits (up to WINDOW_S) for the other
    # to have counted as well. Unlocked, both count 1 live run and both launch; locked, the second launch
    # cannot count until the first has committed, so the first waits out the window alone.
    counted = threading.Barrier(2, timeout=WINDOW_S)
    refusal = services.concurrency_refusal

    def concurrency_refusal_after_a_rival(*args, **kwargs):
        with contextlib.suppress(threading.BrokenBarrierError):  # locked: no rival reaches this point
            counted.wait()
        return refusal(*args, **kwargs)

    monkeypatch.setattr(services, "concurrency_refusal", concurrency_refusal_after_a_rival)
    outcomes: list[str] = []

    def launch() -> None:
        try:
            services.launch_run(experiment, alice)
            outcomes.append("launched")
        except services.QuotaExceeded as refused:
            outcomes.append(str(refused))
        finally:
            connections.close_all()  # this thread's own connection

    threads = [threading.Thread(target=launch) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == 2 and outcomes.count("launched") == 1, outcomes
    assert "already has 2 live runs" in next(o for o in outcomes if o != "launched")
    assert Run.objects.filter(experiment=experiment).count() == 2
    assert len(supervised) == 1
