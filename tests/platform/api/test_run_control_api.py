"""Run control through the REST API, on the database only (the races with a real trainer are in
tests/platform/jobs/test_run_control_races.py): idempotent cancel, resume refusals, checkpoints as
retention left them, logs, events, metrics export, soft delete, and an OpenAPI document that covers
every endpoint."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator

from policylab.accounts.models import Role
from policylab.experiments.models import Run, RunAttempt, RunStatus
from policylab.tracking.ingest import ingest_events
from policylab.tracking.models import Checkpoint, LogLine, MetricPoint
from tests.platform.conftest import make_member, token_client
from tests.platform.tracking.conftest import event

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(alice, team_a, make_experiment) -> Run:
    return Run.objects.create(experiment=make_experiment(alice, team_a), created_by=alice, status=RunStatus.RUNNING,
                              overrides=["max_steps=6", "max_ckpts_to_keep=2"])


def saved(run: Run, step: int, seq: int) -> dict:
    """A checkpoint event as the trainer emits it after saving (and after retention pruned older ones)."""
    path = run.run_dir / "checkpoints" / f"step_{step}"
    path.mkdir(parents=True)
    return event("checkpoint", run.pk, seq, step, {"step": step, "path": str(path), "size_bytes": 10, "contents": ["model"]})


def test_cancel_is_idempotent_and_answers_the_current_state(api_alice, run):
    first = api_alice.post(f"/api/runs/{run.pk}/cancel/")
    assert (first.status_code, first.json()["status"]) == (202, "cancelling")
    again = api_alice.post(f"/api/runs/{run.pk}/cancel/")
    assert (again.status_code, again.json()["status"]) == (200, "cancelling")  # not a 409
    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    done = api_alice.post(f"/api/runs/{run.pk}/cancel/")
    assert (done.status_code, done.json()["status"]) == (200, "cancelled")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    finished = api_alice.post(f"/api/runs/{run.pk}/cancel/")
    assert finished.status_code == 409 and "already succeeded" in finished.json()["errors"][0]["message"]


def test_a_trainer_report_after_a_cancel_never_turns_it_into_failed(api_alice, run):
    """The cancel stops the trainer, which may report `failed: SystemExit: 15` (Ray's SIGTERM handler):
    the run stays cancelling, a second cancel is still 200, and a resume is refused until it is cancelled."""
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.RUNNING, ray_job_id=f"policylab-run{run.pk}-a1")
    assert api_alice.post(f"/api/runs/{run.pk}/cancel/").status_code == 202
    ingest_events([event("status", run.pk, 1, 3, {"state": "failed", "step": 3, "total_steps": 6, "eta_s": None,
                                                  "message": "SystemExit: 15"})], run_id=run.pk, publish=False)
    run.refresh_from_db()
    assert (run.status, run.message) == (RunStatus.CANCELLING, "cancelling: stopping the Ray job")
    assert api_alice.post(f"/api/runs/{run.pk}/cancel/").status_code == 200
    resume = api_alice.post(f"/api/runs/{run.pk}/resume/", {}, format="json")
    assert resume.status_code == 409 and "is cancelling" in resume.json()["errors"][0]["message"]
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLING and run.attempts.count() == 1


def test_resume_is_refused_while_an_attempt_still_runs_on_ray(api_alice, run):
    """Ingest may record the trainer's `succeeded` before Ray's job has ended: a resume now would be
    picked up by nobody (the old supervisor still holds the run)."""
    run.status = RunStatus.SUCCEEDED
    run.save()
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.RUNNING)
    ingest_events([saved(run, 4, 1)], run_id=run.pk, publish=False)
    answer = api_alice.post(f"/api/runs/{run.pk}/resume/", {}, format="json")
    assert answer.status_code == 409 and "attempt 1 is still running" in answer.json()["errors"][0]["message"]


def test_resuming_a_run_that_finished_all_its_steps_is_refused(api_alice, run):
    run.status = RunStatus.SUCCEEDED
    run.save()
    ingest_events([saved(run, 3, 1), saved(run, 6, 2)], run_id=run.pk, publish=False)
    answer = api_alice.post(f"/api/runs/{run.pk}/resume/", {"checkpoint": "latest"}, format="json")
    assert answer.status_code == 409
    assert "already finished all its 6 steps" in answer.json()["errors"][0]["message"]
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED  # nothing relaunched
    earlier = Checkpoint.objects.get(run=run, step=3)
    child = api_alice.post(f"/api/runs/{run.pk}/resume/", {"checkpoint": earlier.pk}, format="json")
    assert child.status_code == 201 and child.json()["id"] != run.pk  # steps 4-6 again, in a new run


def test_checkpoints_mirror_retention_and_pruned_ones_are_refused_by_name(api_alice, run):
    events = [saved(run, step, seq) for seq, step in enumerate((2, 4, 6), start=1)]
    (run.run_dir / "checkpoints" / "step_2").rmdir()  # the trainer's retention (max_ckpts_to_keep=2)
    ingest_events(events, run_id=run.pk, publish=False)
    listed = api_alice.get(f"/api/runs/{run.pk}/checkpoints/").json()["results"]
    assert [(c["step"], c["deleted"], c["on_disk"]) for c in listed] == [(6, False, True), (4, False, True),
                                                                        (2, True, False)]
    # resume takes none while the run is live, and never its final one (max_steps 6): that one offers a fork
    assert [(c["resumable"], c["offer"], c["fork_max_steps"]) for c in listed] == [
        (False, "fork", 12), (False, "fork", None), (False, "none", None)]
    assert "is running" in listed[1]["reason"] and "already finished all its 6 steps" in listed[0]["reason"]
    run.status = RunStatus.FAILED
    run.save()
    pruned = Checkpoint.objects.get(run=run, step=2)
    for action, body in (("resume", {"checkpoint": pruned.pk}), ("fork", {"checkpoint": pruned.pk})):
        answer = api_alice.post(f"/api/runs/{run.pk}/{action}/", body, format="json")
        assert answer.status_code == 400, action
        error = answer.json()["errors"][0]
        assert error["field"] == "checkpoint"
        assert f"checkpoint {pruned.pk} (step 2)" in error["message"] and "deleted by retention" in error["message"]
        assert "resumable: checkpoint" in error["message"]  # says what can be used instead
    (run.run_dir / "checkpoints" / "step_6").rmdir()  # gone from disk behind the platform's back
    latest = api_alice.post(f"/api/runs/{run.pk}/resume/", {"checkpoint": "latest"}, format="json")
    assert latest.status_code == 201 and latest.json()["resume_from"].endswith("step_4")


def test_logs_are_paged_tailed_and_free_of_ansi_codes(api_alice, run):
    texts = ["\x1b[36m(pid=42)\x1b[0m step 1/6 | reward 0.10", "\x1b[1;31mERROR\x1b[0m boom", "plain"]
    for i, text in enumerate(texts):
        LogLine.objects.create(run=run, attempt=1, seq=-1, line_no=i, level="driver", text=text, time=1.0 + i)
    first = api_alice.get(f"/api/runs/{run.pk}/logs/", {"limit": 2}).json()
    assert [line["text"] for line in first["results"]] == ["(pid=42) step 1/6 | reward 0.10", "ERROR boom"]
    assert first["run"]["status"] == "running" and first["run"]["finished"] is False
    rest = api_alice.get(f"/api/runs/{run.pk}/logs/", {"after": first["next_after"]}).json()
    assert [line["text"] for line in rest["results"]] == ["plain"]
    tail = api_alice.get(f"/api/runs/{run.pk}/logs/", {"after": rest["next_after"]}).json()
    assert tail["results"] == [] and tail["next_after"] == rest["next_after"]
    assert api_alice.get(f"/api/runs/{run.pk}/logs/", {"limit": 0}).status_code == 400


def test_the_full_log_page_and_a_failed_runs_one_line_summary(alice, run):
    from django.test import Client

    from policylab.jobs.supervisor import finish
    from policylab.jobs.transitions import FAILED, next_step

    LogLine.objects.create(run=run, attempt=1, seq=-1, line_no=0, level="driver", text="\x1b[33mwarming up\x1b[0m", time=1.0)
    dump = "Job entrypoint command failed with exit code 1, last available logs:\n" + "noise\n" * 5000 + (
        "Traceback (most recent call last):\n  File \"t.py\", line 3\nRuntimeError: CUDA out of memory\n")
    finish(run, None, next_step(FAILED, cancel_requested=False, retries_used=0, max_retries=0, ray_message=dump))
    run.refresh_from_db()
    assert (run.status, run.message) == (RunStatus.FAILED, "RuntimeError: CUDA out of memory")
    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert "RuntimeError: CUDA out of memory" in page and f'href="/runs/{run.pk}/log/"' in page
    full = browser.get(f"/runs/{run.pk}/log/")
    assert full["Content-Type"].startswith("text/plain") and full.content.decode() == "warming up\n"


def test_events_come_back_in_pages_of_seq(api_alice, run):
    events = [event("metrics", run.pk, seq, seq, {"values": {"reward/mean": seq / 10}}) for seq in range(1, 6)]
    events.append(event("log", run.pk, 6, 5, {"level": "info", "lines": ["\x1b[32mdone\x1b[0m"]}))
    ingest_events(events, run_id=run.pk, publish=False)
    first = api_alice.get(f"/api/runs/{run.pk}/events/", {"limit": 4}).json()
    assert [e["seq"] for e in first["events"]] == [1, 2, 3, 4] and first["next_after"] == 4
    assert first["events"][0]["data"]["values"] == {"reward/mean": 0.1}
    rest = api_alice.get(f"/api/runs/{run.pk}/events/", {"after": 4}).json()
    assert [(e["seq"], e["type"]) for e in rest["events"]] == [(5, "metrics"), (6, "log")]
    assert rest["events"][1]["data"]["lines"] == ["done"] and rest["seq"] == 6
    assert api_alice.get(f"/api/runs/{run.pk}/events/", {"after": 6}).json() == {**rest, "events": [], "next_after": None}


def test_metrics_download_as_csv_and_json(api_alice, run):
    rows = [("reward/mean", 1, 0.5), ("reward/mean", 2, 0.75), ("actor/kl", 2, None)]
    MetricPoint.objects.bulk_create(MetricPoint(run=run, key=k, step=s, value=v, time=1.0, seq=s) for k, s, v in rows)
    table = api_alice.get(f"/api/runs/{run.pk}/metrics/export/").json()
    assert table == {"run": run.pk, "columns": ["step", "actor/kl", "reward/mean"], "rows": [[1, None, 0.5], [2, None, 0.75]]}
    answer = api_alice.get(f"/api/runs/{run.pk}/metrics/export/", {"format": "csv"})
    assert answer["Content-Type"].startswith("text/csv")
    assert f"run-{run.pk}-metrics.csv" in answer["Content-Disposition"]
    assert list(csv.reader(io.StringIO(answer.content.decode()))) == [
        ["step", "actor/kl", "reward/mean"], ["1", "", "0.5"], ["2", "", "0.75"]]
    missing = api_alice.get("/api/runs/999999/metrics/export/", {"format": "csv"})
    assert missing.status_code == 404 and missing.json()["errors"]


def test_delete_is_for_team_admins_only_and_hides_everything(alice, team_a, make_experiment, api_alice):
    admin = make_member("ada", team_a, Role.ADMIN)
    api_admin = token_client(admin, team_a)
    experiment = make_experiment(alice, team_a)
    live = Run.objects.create(experiment=experiment, status=RunStatus.RUNNING)
    done = Run.objects.create(experiment=experiment, status=RunStatus.SUCCEEDED)
    assert api_alice.delete(f"/api/runs/{done.pk}/").status_code == 403  # a member, not an admin
    refused = api_admin.delete(f"/api/runs/{live.pk}/")
    assert refused.status_code == 409 and "cancel it" in refused.json()["errors"][0]["message"]
    assert api_admin.delete(f"/api/experiments/{experiment.pk}/").status_code == 409  # it has a live run

    assert api_admin.delete(f"/api/runs/{done.pk}/").status_code == 204
    assert api_alice.get(f"/api/runs/{done.pk}/").status_code == 404
    assert api_alice.get(f"/api/runs/{done.pk}/logs/").status_code == 404
    assert done.pk not in [r["id"] for r in api_alice.get("/api/runs/").json()["results"]]
    assert api_admin.delete(f"/api/runs/{done.pk}/").status_code == 404
    assert Run.objects.filter(pk=done.pk).exists()  # soft: the row stays

    Run.objects.filter(pk=live.pk).update(status=RunStatus.CANCELLED)
    assert api_admin.delete(f"/api/experiments/{experiment.pk}/").status_code == 204
    assert api_alice.get(f"/api/experiments/{experiment.pk}/").status_code == 404
    assert api_alice.get(f"/api/runs/{live.pk}/").status_code == 404  # its runs went with it
    assert api_alice.get("/api/experiments/").json()["count"] == 0


def test_the_run_page_offers_cancel_to_members_only(alice, victor, run):
    from django.test import Client

    for user, offered in ((alice, True), (victor, False)):
        browser = Client()
        browser.force_login(user)
        page = browser.get(f"/runs/{run.pk}/").content.decode()
        assert ('id="cancel-run"' in page) is offered


def api_paths() -> set[str]:
    """Every URL under /api/ the URLconf routes, in OpenAPI's spelling ({id}, {run_id})."""
    found: set[str] = set()

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route.startswith("api/"):
                found.add("/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: "{id}" if m[1] == "pk" else f"{{{m[1]}}}", route))

    walk(get_resolver().url_patterns, "")
    return found - {"/api/schema/", "/api/docs/", "/api/redoc/"}  # the document and its viewers


def test_the_openapi_document_covers_every_api_endpoint():
    document = SchemaGenerator().get_schema(request=None, public=True)
    routed = api_paths()
    assert {"/api/runs/{run_id}/checkpoints/", "/api/runs/{run_id}/logs/", "/api/runs/{run_id}/events/",
            "/api/runs/{run_id}/metrics/export/"} <= routed
    assert routed - set(document["paths"]) == set()
    assert "delete" in document["paths"]["/api/runs/{id}/"] and "delete" in document["paths"]["/api/experiments/{id}/"]
    export = document["paths"]["/api/runs/{run_id}/metrics/export/"]["get"]["responses"]["200"]["content"]
    assert {"application/json", "text/csv"} <= set(export)
    cancel = document["paths"]["/api/runs/{id}/cancel/"]["post"]["responses"]
    assert {"200", "202", "409"} <= set(cancel)


def test_a_project_is_created_in_the_tokens_team_when_none_is_named(api_alice, team_a):
    created = api_alice.post("/api/projects/", {"name": "default"}, format="json")
    assert created.status_code == 201 and created.json()["team"] == team_a.pk


def test_resume_from_is_run_relative_in_answers_and_accepted_run_relative_in_requests(api_alice, run):
    """Issue 46 item 7: the API answered `resume_from` with the server's absolute checkpoint path, and a request
    could name a checkpoint only by id."""
    ingest_events([saved(run, step, seq) for seq, step in enumerate((2, 4), start=1)], run_id=run.pk, publish=False)
    run.status = RunStatus.FAILED
    run.save()
    fork = api_alice.post(f"/api/runs/{run.pk}/fork/", {"checkpoint": "checkpoints/step_2",
                                                        "overrides": {"max_steps": 8}}, format="json")
    assert fork.status_code == 201, fork.json()
    child = fork.json()
    assert child["parent_run"] == run.pk and child["resume_from"] == "checkpoints/step_2"  # in the parent's directory
    assert child["parent_checkpoint"] == Checkpoint.objects.get(run=run, step=2).pk
    for wrong in (str(run.run_dir / "checkpoints" / "step_4"), "checkpoints/step_3"):  # a server path; none there
        answer = api_alice.post(f"/api/runs/{run.pk}/resume/", {"checkpoint": wrong}, format="json")
        assert answer.status_code == 400 and answer.json()["errors"][0]["field"] == "checkpoint", wrong
    resumed = api_alice.post(f"/api/runs/{run.pk}/resume/", {"checkpoint": "checkpoints/step_4"}, format="json")
    assert resumed.status_code == 201 and resumed.json()["resume_from"] == "checkpoints/step_4"
    detail = api_alice.get(f"/api/runs/{run.pk}/").json()
    assert detail["resume_from"] == "checkpoints/step_4" and str(run.run_dir) not in str(detail)


def test_a_log_line_has_one_shape_in_the_api_its_schema_and_the_live_log_frame(api_alice, run):
    """Issue 42: selectors.log_dict is the one shape of a log line; the API page, the websocket's run.logs frame
    (colours kept, so the same text for a line without escapes) and the OpenAPI schema all carry its keys."""
    from policylab.api.tracking_views import LogLineOut
    from policylab.tracking.selectors import log_dict

    line = LogLine.objects.create(run=run, attempt=1, seq=-1, line_no=7, level="driver", text="step 1/6", time=2.0)
    shown = api_alice.get(f"/api/runs/{run.pk}/logs/").json()["results"]
    assert shown == [log_dict(line, colours=True)]
    assert shown[0]["line_no"] == 7
    assert set(LogLineOut().fields) == set(shown[0])


def test_a_rollout_sample_and_a_checkpoint_have_one_shape_in_the_api_and_the_replayed_events(api_alice, run):
    """Issue 42: the rollouts API, the sample detail and the events page (what a reconnecting websocket replays)
    show a sample through selectors.rollout_dict, and a checkpoint through selectors.checkpoint_dict."""
    sample = {"group_id": 0, "sample_index": 1, "prompt": "2+2?", "response": "4", "reward": 1.0, "advantage": 0.5,
              "prompt_length": 3, "response_length": 1, "stop_reason": "stop", "tokens": ["4"],
              "token_logprobs": [-0.1], "token_advantages": [0.5], "token_mask": [1]}
    ingest_events([event("rollouts", run.pk, 1, 1, {"samples": [sample]}), saved(run, 2, 2)], run_id=run.pk,
                  publish=False)
    listed = api_alice.get(f"/api/runs/{run.pk}/rollouts/").json()["results"][0]
    assert api_alice.get(f"/api/rollouts/{listed['id']}/").json() == listed
    replayed = api_alice.get(f"/api/runs/{run.pk}/events/").json()["events"]
    assert [e["type"] for e in replayed] == ["rollouts", "checkpoint"]
    token_keys = {"tokens", "token_logprobs", "token_logprobs_trainer", "token_logprob_mismatch", "token_advantages",
                  "token_mask", "turns"}
    assert replayed[0]["data"]["samples"] == [{k: v for k, v in listed.items() if k not in token_keys}]
    checkpoint = api_alice.get(f"/api/runs/{run.pk}/checkpoints/").json()["results"][0]
    assert replayed[1]["data"] == checkpoint and checkpoint["path"] == "checkpoints/step_2"


def test_a_live_checkpoint_frame_is_the_api_s_dict_of_the_same_checkpoint(api_alice, run, settings):
    """Issue 42: the websocket's checkpoint frames carried the trainer's raw event (its absolute-made-relative path,
    size, contents) plus an id, the last of a burst the whole table; now each carries selectors.checkpoint_dict of
    its stored row, what the API lists and a replay shows (its verdict included), and the page takes the table from
    the API. Step 6 retires step 2 (max_ckpts_to_keep=2): the API marks it, and no frame claims it is on disk."""
    from asgiref.sync import async_to_sync
    from channels.layers import channel_layers, get_channel_layer

    from policylab.tracking.ingest import group_name, publish_events

    events = [saved(run, step, seq) for seq, step in ((1, 2), (2, 4), (3, 6))]
    ingest_events(events, run_id=run.pk, publish=False)
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(run.pk), channel)
    try:
        publish_events(run.pk, events[1:], 3)
        frames = async_to_sync(layer.receive)(channel)["events"]
    finally:
        channel_layers.backends.clear()
    listed = {c["step"]: c for c in api_alice.get(f"/api/runs/{run.pk}/checkpoints/").json()["results"]}
    assert [f["data"] for f in frames] == [listed[4], listed[6]]
    assert frames[1]["data"]["path"] == "checkpoints/step_6" and frames[1]["data"]["on_disk"]
    assert listed[2]["deleted"] and not listed[2]["on_disk"]
