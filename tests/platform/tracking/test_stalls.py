"""The watchdog's stall events: stored once per `stalled` event (replays change nothing), closed by their
`recovered` event, shown as a banner with the stacks on the run page while the latest attempt is stuck, and
listed in the API's run detail, within the caller's team."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from policylab.experiments.models import RunAttempt, RunStatus
from policylab.tracking.ingest import ingest_events, live_event
from policylab.tracking.models import RunStall
from tests.platform.tracking.conftest import event

pytestmark = pytest.mark.django_db


def stalled(run_dir: str, phase: str = "generate") -> dict[str, Any]:
    return {"state": "stalled", "phase": phase, "elapsed_s": 12.5, "bound_s": 5.0, "on_stall": "wait",
            "summary": f"phase {phase} has run 12 s, past its bound of 5.0 s; waiting on actor_infer rank 0 in generate",
            "waiting": [{"role": "actor_infer", "method": "generate", "ranks": [0]}],
            "stacks": f"== driver\n  File \"{run_dir}/code.py\", line 3, in wait_for_engine\n"
                      "== actor_infer rank 0 in generate (pid 42)\nThread 42 (idle): \"MainThread\"\n    sample_tokens (hf.py:88)",
            "file": "stalls/attempt-1-stall-1.txt"}


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_stall_is_stored_once_and_its_recovery_closes_it(make_run, runs_dir) -> None:
    run = make_run()
    events = [event("stall", run.pk, 7, 3, stalled(str(run.run_dir))),
              event("stall", run.pk, 9, 3, {"state": "recovered", "phase": "generate", "elapsed_s": 31.0})]
    ingest_events(events[:1], publish=False)
    ingest_events(events[:1], publish=False)  # a replay
    [stall] = RunStall.objects.filter(run=run)
    assert (stall.phase, stall.elapsed_s, stall.bound_s, stall.recovered_after_s) == ("generate", 12.5, 5.0, None)
    assert stall.waiting == [{"role": "actor_infer", "method": "generate", "ranks": [0]}]
    ingest_events(events, publish=False)
    stall.refresh_from_db()
    assert stall.recovered_after_s == 31.0 and RunStall.objects.filter(run=run).count() == 1


def test_an_open_stall_is_a_banner_with_the_stacks_and_the_api_lists_it_for_the_team_only(
        make_run, user, other_user, runs_dir) -> None:
    run = make_run(user=user, status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.RUNNING)
    ingest_events([event("stall", run.pk, 7, 3, stalled(str(run.run_dir)))], publish=False)
    page = client_of(user).get(reverse("tracking:run_detail", args=[run.pk])).content.decode()
    banner = page[page.index('class="card stall-banner"'):]
    assert "stalled</span> in generate" in banner and "waiting on actor_infer rank 0 in generate" in banner
    assert "sample_tokens (hf.py:88)" in banner and "wait_for_engine" in banner
    assert str(runs_dir) not in page  # the driver's file paths are shown relative to the run
    detail = client_of(user).get(reverse("api:run-detail", args=[run.pk])).json()
    [stall] = detail["stalls"]
    assert stall["open"] and stall["phase"] == "generate" and stall["waiting"][0]["ranks"] == [0]
    assert client_of(other_user).get(reverse("api:run-detail", args=[run.pk])).status_code == 404


def test_a_recovered_stall_or_a_finished_run_shows_no_banner_only_the_history(make_run, user, runs_dir) -> None:
    run = make_run(user=user, status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.RUNNING)
    ingest_events([event("stall", run.pk, 7, 3, stalled(str(run.run_dir))),
                   event("stall", run.pk, 8, 3, {"state": "recovered", "phase": "generate", "elapsed_s": 20.0})],
                  publish=False)
    page = client_of(user).get(reverse("tracking:run_detail", args=[run.pk])).content.decode()
    assert "stall-banner" not in page and "ended by itself after 20.0 s" in page
    ingest_events([event("stall", run.pk, 9, 4, stalled(str(run.run_dir), "reward"))], publish=False)
    run.status = RunStatus.FAILED
    run.save(update_fields=["status"])
    page = client_of(user).get(reverse("tracking:run_detail", args=[run.pk])).content.decode()
    assert "stall-banner" not in page and "the attempt ended" in page


def test_browsers_get_the_stall_without_its_stacks(make_run, runs_dir) -> None:
    run = make_run()
    live = live_event(event("stall", run.pk, 7, 3, stalled(str(run.run_dir))), run.run_dir)
    assert live["data"] == {"state": "stalled", "phase": "generate"}  # the page fetches the rendered section


def test_a_page_that_connects_after_a_stall_or_its_recovery_is_stored_gets_them_in_the_replay(make_run, runs_dir) -> None:
    # as for alerts (test_alerts): the page renders its stall banner, then opens its websocket from the seq it
    # rendered; a stall or a recovery stored in between reaches it only through the replay (and the events API),
    # as the live event would (state and phase: the page fetches the section), or the banner stays as rendered
    from policylab.tracking.selectors import events_after, events_page

    run = make_run()
    events = [event("stall", run.pk, 7, 3, stalled(str(run.run_dir))),
              event("metrics", run.pk, 8, 4, {"values": {"loss": 1.0}}),
              event("stall", run.pk, 9, 4, {"state": "recovered", "phase": "generate", "elapsed_s": 31.0})]
    ingest_events(events, publish=False)

    def shown(replayed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: e[k] for k in ("type", "seq", "step", "attempt", "data")} for e in replayed if e["type"] == "stall"]

    live = [{k: e[k] for k in ("type", "seq", "step", "attempt")} | {"data": live_event(e, run.run_dir)["data"]}
            for e in (events[0], events[2])]
    assert [e["data"] for e in live] == [{"state": "stalled", "phase": "generate"},
                                        {"state": "recovered", "phase": "generate"}]
    replay = events_after(run, 5)
    assert replay is not None and shown(replay["events"]) == live
    after_stall = events_after(run, 7)  # the page rendered the banner: the recovery alone follows
    assert after_stall is not None and shown(after_stall["events"]) == live[1:]
    page = events_page(run, after=0, limit=100)
    assert [(e["type"], e["seq"]) for e in page["events"]] == [("stall", 7), ("metrics", 8), ("stall", 9)]
    assert [e["time"] for e in page["events"][::2]] == pytest.approx([events[0]["time"], events[2]["time"]])
    assert events_page(run, after=0, limit=1)["next_after"] == 7  # a page of one: the stall first


def test_each_stall_says_how_it_ended_and_a_recovery_never_closes_a_closed_stall(make_run, user, runs_dir) -> None:
    """Issue 46 item 4: a run that succeeded listed half its stalls as "the attempt ended"; a second recovery of
    the same phase overwrote the first one's stall and left an earlier one open."""
    run = make_run(user=user, status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.FAILED)
    RunAttempt.objects.create(run=run, number=2, status=RunStatus.RUNNING)
    fail = stalled(str(run.run_dir), "reward") | {"on_stall": "fail"}
    ingest_events([event("stall", run.pk, 3, 1, stalled(str(run.run_dir))),  # two stalls of generate, both open ...
                   event("stall", run.pk, 4, 1, stalled(str(run.run_dir))),
                   event("stall", run.pk, 5, 1, {"state": "recovered", "phase": "generate", "elapsed_s": 0.25}),
                   event("stall", run.pk, 6, 1, {"state": "recovered", "phase": "generate", "elapsed_s": 0.5}),
                   event("stall", run.pk, 7, 1, fail),  # ... and one that on_stall: fail ended
                   event("stall", run.pk, 8, 2, stalled(str(run.run_dir)), attempt=2)], publish=False)
    assert sorted(RunStall.objects.filter(run=run, phase="generate", attempt=1).values_list(
        "recovered_after_s", flat=True)) == [0.25, 0.5]  # each closed once
    run.status = RunStatus.SUCCEEDED
    run.save(update_fields=["status"])
    stalls = client_of(user).get(reverse("api:run-detail", args=[run.pk])).json()["stalls"]
    assert [(s["seq"], s["ended"]) for s in stalls] == [(8, "attempt-ended"), (7, "failed"), (4, "recovered"),
                                                        (3, "recovered")]
    by_seq = {s["seq"]: s["ended_text"] for s in stalls}
    assert by_seq[4] == "recovered: the phase ended by itself after 250 ms"  # the latest open one first
    assert by_seq[3] == "recovered: the phase ended by itself after 500 ms"
    assert by_seq[7] == "the watchdog ended attempt 1 without a retry (on_stall: fail)"
    assert by_seq[8] == "the attempt ended (succeeded) while the phase was still running"


def test_an_open_stall_makes_the_run_stalled_in_the_api_and_the_rendered_page(make_run, user, runs_dir) -> None:
    """Issue 46 item 4: only the page's script said `stalled`, after load; the API said nothing. The run's status
    stays `running` (decision 0034); `stalled` and `status_display` say what the page shows, and the server renders
    it in the title, the status and the ETA."""
    run = make_run(user=user, status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.RUNNING)
    client = client_of(user)
    url, api = reverse("tracking:run_detail", args=[run.pk]), reverse("api:run-detail", args=[run.pk])

    def shown() -> tuple[str, bool, str, str, str, str]:
        detail = client.get(api).json()
        page = client.get(url).content.decode()
        title = page[page.index("<title>") + 7:page.index("</title>")]
        state = page[page.index('id="run-state"'):]
        eta = page[page.index('id="run-eta">') + 13:]
        return (detail["status"], detail["stalled"], detail["status_display"], title.split(" · ")[0],
                state[:state.index("</span>")], eta[:eta.index("</strong>")])

    assert shown() == ("running", False, "running", f"Run {run.pk}", 'id="run-state" class="status status-running">running', "—")
    ingest_events([event("stall", run.pk, 7, 3, stalled(str(run.run_dir)))], publish=False)
    assert shown() == ("running", True, "stalled", f"Run {run.pk} (stalled)",
                       'id="run-state" class="status status-stalled">stalled', "— (stalled)")
    ingest_events([event("stall", run.pk, 8, 3, {"state": "recovered", "phase": "generate", "elapsed_s": 20.0})],
                  publish=False)
    assert shown()[:4] == ("running", False, "running", f"Run {run.pk}")
    ingest_events([event("stall", run.pk, 9, 4, stalled(str(run.run_dir), "reward"))], publish=False)
    assert shown()[1] is True
    run.status = RunStatus.FAILED  # the attempt ended: no longer stalled
    run.save(update_fields=["status"])
    assert shown()[:3] == ("failed", False, "failed")


def test_the_run_detail_api_computes_stalled_now_once_per_run(make_run, user, runs_dir, monkeypatch) -> None:
    """`stalled` and `status_display` share one stalled_now per run (its aggregate and exists queries ran twice);
    the response says the same."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from policylab.api import serializers
    from policylab.tracking import selectors

    run = make_run(user=user, status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.RUNNING)
    ingest_events([event("stall", run.pk, 7, 3, stalled(str(run.run_dir)))], publish=False)
    calls: list[int] = []
    monkeypatch.setattr(serializers, "stalled_now", lambda r: calls.append(r.pk) or selectors.stalled_now(r))
    client = client_of(user)
    client.get(reverse("api:run-detail", args=[run.pk]))  # the session and caches warm
    calls.clear()
    with CaptureQueriesContext(connection) as queries:
        detail = client.get(reverse("api:run-detail", args=[run.pk])).json()
    assert calls == [run.pk]
    assert (detail["status"], detail["stalled"], detail["status_display"]) == ("running", True, "stalled")
    latest = [q["sql"] for q in queries.captured_queries if 'MAX("experiments_runattempt"."number")' in q["sql"]]
    assert len(latest) == 1, latest  # stalled_now's latest-attempt aggregate, once
