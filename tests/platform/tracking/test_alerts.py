"""Run-health alerts (decision 0050): the trainer's `alert` events are stored once each (replays add nothing),
listed by the API (run detail and /alerts/) with their step, metric, value, threshold and samples, shown on the
run page linked to the inspector at their step, all within the caller's team."""

from __future__ import annotations

import math

import pytest
from django.test import Client
from django.urls import reverse

from policylab.tracking.ingest import ingest_events, live_event
from policylab.tracking.models import RunAlert
from tests.platform.tracking.conftest import event
from trainer.config.schema import HealthConfig
from trainer.pipeline.run.health import HealthMonitor, SampleFacts
from trainer.telemetry import events as ev

pytestmark = pytest.mark.django_db


def trainer_alerts(run_id: int) -> list[dict]:
    """The alert events the trainer's own monitor emits for a step whose entropy collapsed and whose responses
    ran to the length cap, and for a later step with a NaN loss."""
    monitor = HealthMonitor(HealthConfig())
    samples = [SampleFacts(3, 0, "length", [1, 2]), SampleFacts(3, 1, "eos", [1]), SampleFacts(5, 2, "length", [4])]
    monitor.check(1, {"response_length/clip_ratio": 0.0})
    step4 = monitor.check(4, {"actor/entropy": 0.01, "response_length/clip_ratio": 2 / 3}, samples)
    step5 = monitor.check(5, {"actor/pg_loss": math.nan})
    alerts = [(4, a) for a in step4] + [(5, a) for a in step5]
    return [ev.make_event("alert", run_id=str(run_id), attempt=1, seq=10 + i, step=step,
                          data=ev.alert_data(a.data()), time=1_763_800_000.0 + i).to_dict()
            for i, (step, a) in enumerate(alerts)]


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_alerts_are_stored_once_with_step_metric_threshold_and_samples(make_run) -> None:
    run = make_run()
    events = trainer_alerts(run.pk)
    ingest_events(events, publish=False)
    ingest_events(events, publish=False)  # a replay
    rows = {a.kind: a for a in RunAlert.objects.filter(run=run)}
    assert sorted(rows) == ["entropy_collapse", "length_cap", "nan"]
    entropy, length, nan = rows["entropy_collapse"], rows["length_cap"], rows["nan"]
    assert (entropy.step, entropy.metric, entropy.value, entropy.threshold) == (4, "actor/entropy", 0.01, 0.05)
    assert length.samples == [{"group_id": 3, "sample_index": 0}, {"group_id": 5, "sample_index": 2}]
    assert (nan.step, nan.metric, nan.value) == (5, "actor/pg_loss", None)
    assert live_event(events[0], run.run_dir)["data"] == {"kind": "entropy_collapse"}  # the page fetches the rest


def test_a_page_that_connects_after_an_alert_is_stored_gets_it_in_the_replay(make_run) -> None:
    # the run page renders its alert list, then opens its websocket from the seq it rendered: an alert stored in
    # between reaches it only through the replay (and the events API), as the live event would (kind only: the page
    # fetches the section)
    from policylab.tracking.selectors import events_after, events_page

    run = make_run()
    events = trainer_alerts(run.pk)
    ingest_events(events, publish=False)
    replay = events_after(run, 10)
    assert replay is not None
    expected = [{k: e[k] for k in ("type", "seq", "step", "attempt")} | {"data": live_event(e, run.run_dir)["data"]}
                for e in events[1:]]
    assert [{k: e[k] for k in ("type", "seq", "step", "attempt", "data")} for e in replay["events"]] == expected
    assert expected[0]["data"] == {"kind": events[1]["data"]["kind"]}
    page = events_page(run, after=0, limit=100)
    assert [(e["type"], e["seq"]) for e in page["events"]] == [("alert", 10), ("alert", 11), ("alert", 12)]
    assert page["events"][0]["time"] == pytest.approx(events[0]["time"])


def test_api_and_run_page_show_alerts_to_the_team_only(make_run, user, other_user) -> None:
    run = make_run(user=user)
    ingest_events(trainer_alerts(run.pk), publish=False)
    listed = client_of(user).get(reverse("tracking:api-alerts", args=[run.pk])).json()
    assert [(a["kind"], a["step"]) for a in listed] == [("nan", 5), ("length_cap", 4), ("entropy_collapse", 4)]
    length = listed[1]
    assert (length["metric"], length["value"], length["threshold"]) == ("response_length/clip_ratio",
                                                                       pytest.approx(2 / 3), 0.5)
    assert length["samples"][0] == {"group_id": 3, "sample_index": 0}
    inspector = reverse("tracking:rollouts", args=[run.pk])
    # no samples of step 4 were logged: the first page, the alert's samples flagged (step.group.index)
    assert length["inspector_url"] == f"{inspector}?step_min=4&step_max=4&step=4&latest=0&flagged=4.3.0,4.5.2"
    assert listed[2]["inspector_url"] == f"{inspector}?step_min=4&step_max=4&step=4&latest=0"  # entropy: no samples
    detail = client_of(user).get(reverse("api:run-detail", args=[run.pk])).json()
    assert detail["alerts"] == listed
    page = client_of(user).get(reverse("tracking:run_detail", args=[run.pk])).content.decode()
    section = page[page.index('id="run-alerts"'):]
    assert "3 alerts" in section and "<strong>entropy_collapse</strong> at step 4" in section
    assert f'href="{inspector}?step_min=4&amp;step_max=4&amp;step=4&amp;latest=0"' in section
    assert "group 3 #0, group 5 #2" in section and "NaN/inf" in section
    stranger = client_of(other_user)
    assert stranger.get(reverse("tracking:api-alerts", args=[run.pk])).status_code == 404
    assert stranger.get(reverse("api:run-detail", args=[run.pk])).status_code == 404


@pytest.mark.parametrize(("groups", "capped", "page"), [(4, [(3, 0)], 1), (16, [(9, 1), (9, 4)], 2)])
def test_the_inspector_link_opens_the_page_holding_the_first_flagged_sample(
        make_run, user, groups: int, capped: list[tuple[int, int]], page: int) -> None:
    # groups x 8 samples logged at step 4, shown in the inspector's order (step, group, sample) 50 a page: 24 samples
    # come before (3, 0) (page 1), 73 before (9, 1) (page 2)
    run = make_run(user=user)
    samples = [{"prompt": f"copy {g}", "response": "abc", "reward": 0.5, "advantage": 0.0, "prompt_length": 2,
                "response_length": 3, "stop_reason": "length" if (g, i) in capped else "eos", "group_id": g,
                "sample_index": i} for g in range(groups) for i in range(8)]
    ingest_events([event("rollouts", run.pk, 1, 4, {"samples": samples})], publish=False)
    monitor = HealthMonitor(HealthConfig())
    monitor.check(1, {"response_length/clip_ratio": 0.0})
    facts = [SampleFacts(s["group_id"], s["sample_index"], s["stop_reason"], [1]) for s in samples]
    (alert,) = monitor.check(4, {"response_length/clip_ratio": 0.6}, facts)
    ingest_events([ev.make_event("alert", run_id=str(run.pk), attempt=1, seq=2, step=4, data=ev.alert_data(alert.data()),
                                 time=1_763_800_000.0).to_dict()], publish=False)
    (listed,) = client_of(user).get(reverse("tracking:api-alerts", args=[run.pk])).json()
    flagged = ",".join(f"4.{g}.{i}" for g, i in capped)
    inspector = reverse("tracking:rollouts", args=[run.pk])
    assert listed["inspector_url"] == (f"{inspector}?step_min=4&step_max=4&step=4&latest=0&flagged={flagged}"
                                       + ("&page=2" if page == 2 else ""))


def test_a_run_without_alerts_hides_the_section(make_run, user) -> None:
    run = make_run(user=user)
    ingest_events([event("metrics", run.pk, 1, 1, {"values": {"actor/entropy": 2.0}})], publish=False)
    page = client_of(user).get(reverse("tracking:run_detail", args=[run.pk])).content.decode()
    assert 'id="run-alerts" class="card alert-list" aria-label="health alerts" hidden' in page
    assert client_of(user).get(reverse("tracking:api-alerts", args=[run.pk])).json() == []


def test_history_counts_each_runs_alerts(make_run, user) -> None:
    flagged, clean = make_run(user=user), make_run(user=user, name="clean")
    ingest_events(trainer_alerts(flagged.pk), publish=False)
    page = client_of(user).get(reverse("tracking:history")).content.decode()
    row = page[page.index(f'<tr data-run="{flagged.pk}">'):]
    assert f'href="{reverse("tracking:run_detail", args=[flagged.pk])}#run-alerts" class="status status-alert">3</a>' in row[:row.index("</tr>")]
    row = page[page.index(f'<tr data-run="{clean.pk}">'):]
    assert '<td class="alerts">—</td>' in row[:row.index("</tr>")]


def test_an_odd_alert_is_stored_harmlessly(make_run) -> None:
    run = make_run()
    odd = {"kind": "entropy_collapse", "metric": "actor/entropy", "value": "high", "threshold": None,
           "message": "m\x00", "samples": 7}
    ingest_events([event("alert", run.pk, 3, 2, odd), event("alert", run.pk, 4, 2, {**odd, "samples": [{"group_id": "x"}]})],
                  publish=False)
    rows = list(RunAlert.objects.filter(run=run).order_by("seq"))
    assert [(a.value, a.threshold, a.samples, a.message) for a in rows] == [(None, None, [], "m\ufffd")] * 2
