"""The Ray driver's output reaches an open run page while the run trains (it used to wait for a reload): the
supervisor stores new lines and sends them to the run's websocket group, colour codes kept."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

from policylab.experiments.models import RunAttempt, RunStatus
from policylab.jobs.supervisor import sync_logs
from policylab.tracking.ingest import ingest_events
from tests.platform.tracking.conftest import event
from tests.platform.tracking.test_websocket import communicator, receive_until, session_headers

pytestmark = pytest.mark.django_db(transaction=True)


class FakeRay:
    """What sync_logs asks of Ray's job client: the job's whole output so far."""

    def __init__(self) -> None:
        self.output = ""

    def get_job_logs(self, submission_id: str) -> str:
        return self.output


def test_driver_output_is_pushed_to_the_page_as_it_is_stored(make_run, user) -> None:
    run = make_run(user=user, status=RunStatus.RUNNING)
    attempt = RunAttempt.objects.create(run=run, number=1, ray_job_id="job-1", status=RunStatus.RUNNING)
    async_to_sync(follow_driver_output)(run, attempt, session_headers(user))


async def follow_driver_output(run, attempt, headers) -> None:
    ray = FakeRay()
    ray.output = "loading model\n"
    await database_sync_to_async(sync_logs)(ray, run, attempt, final=False)
    await database_sync_to_async(ingest_events)([event("log", run.pk, 1, 0, {"level": "info", "lines": ["trainer says hi"]})])
    comm = communicator(run.pk, headers, "?series=lazy")
    assert (await comm.connect())[0]
    (snapshot,) = await receive_until(comm, lambda got: got and "seq" in got[-1])
    # the tail in stored order, driver lines (seq = -attempt) and trainer lines together
    assert [(line["seq"], line["text"]) for line in snapshot["logs"]] == [(-1, "loading model"), (1, "trainer says hi")]
    assert snapshot["series"] == {} and snapshot["metrics"] == []

    ray.output += "\x1b[32mstep 1\x1b[0m reward 0.5\x1b[2K\nstep 2 (half a line"
    await database_sync_to_async(sync_logs)(ray, run, attempt, final=False)
    frame = await comm.receive_json_from(timeout=5)
    assert frame["type"] == "logs"
    assert [(line["seq"], line["line_no"], line["text"]) for line in frame["lines"]] == [
        (-1, 1, "\x1b[32mstep 1\x1b[0m reward 0.5")]  # colours kept, the cursor escape dropped, whole lines only
    ray.output += ")\n"
    await database_sync_to_async(sync_logs)(ray, run, attempt, final=True)
    frame = await comm.receive_json_from(timeout=5)
    assert [line["text"] for line in frame["lines"]] == ["step 2 (half a line)"]
    await database_sync_to_async(sync_logs)(ray, run, attempt, final=True)  # nothing new: nothing sent
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()
