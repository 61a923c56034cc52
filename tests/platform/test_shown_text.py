"""What team members, viewers included, are shown of text the servers wrote (issue 34, finding 12): log
lines carried the events Redis URL (a password in REDIS_URL would have leaked to every viewer), and path
errors and checkpoint listings showed the deployment's absolute paths."""

from __future__ import annotations

import pytest
from django.test import Client

from policylab.accounts.services import create_api_token
from policylab.experiments.models import Run, RunAttempt, RunStatus
from policylab.experiments.run_state import write_run_state
from policylab.jobs.supervisor import store_driver_lines
from policylab.tracking.ingest import group_name, ingest_events, publish_events
from policylab.tracking.models import Checkpoint, LogLine
from policylab.tracking.selectors import checkpoint_dict, run_snapshot

PASSWORD = "s3cret-Pa55"
EVENTS_URL = f"redis://:{PASSWORD}@redis.internal:6379/0"


@pytest.mark.parametrize(("text", "shown"), [
    (f"events -> {EVENTS_URL}", "events -> redis://***@redis.internal:6379/0"),
    ("DATABASE_URL=postgres://policylab:pw@db:5432/policylab", "DATABASE_URL=postgres://***@db:5432/policylab"),
    ("cloning https://x-access-token:ghp_abc@github.com/o/r.git", "cloning https://***@github.com/o/r.git"),
    ("GET http://host:8080/api?token=abc123&page=2", "GET http://host:8080/api?token=***&page=2"),
    ("s3://bucket/key?password=p&x=1 and rediss://u:p@h", "s3://bucket/key?password=***&x=1 and rediss://***@h"),
    ("redis://redis:6379/0 has no credentials", "redis://redis:6379/0 has no credentials"),
    ("step 3 | reward=0.5 | kl=0.01 | user@example.com", "step 3 | reward=0.5 | kl=0.01 | user@example.com"),
])
def test_credentials_in_urls_are_redacted(text, shown):
    from policylab.redaction import redact_credentials

    assert redact_credentials(text) == shown


def log_event(run: Run, seq: int, lines: list[str]) -> dict:
    return {"v": 1, "type": "log", "run_id": str(run.pk), "attempt": 1, "seq": seq, "step": 0,
            "time": 1_763_800_000.0 + seq, "data": {"level": "info", "lines": lines}}


@pytest.fixture
def run(alice, team_a, make_experiment) -> Run:
    return Run.objects.create(experiment=make_experiment(alice, team_a), created_by=alice, status=RunStatus.RUNNING)


@pytest.mark.django_db
def test_a_viewer_never_sees_the_events_redis_password_in_logs(run, victor, team_a):
    attempt = RunAttempt.objects.create(run=run, number=1)
    store_driver_lines(run, attempt, 0, [f"trainer --events-redis {EVENTS_URL}", "driver line"])  # the Ray driver's
    ingest_events([log_event(run, 1, [f"telemetry: stream on {EVENTS_URL}"])], publish=False)  # the trainer's
    LogLine.objects.create(run=run, attempt=1, seq=-9, line_no=0, level="driver", text=f"stored earlier: {EVENTS_URL}",
                           time=1.0)
    stored = list(LogLine.objects.exclude(seq=-9).values_list("text", flat=True))
    assert len(stored) == 3 and not any(PASSWORD in text for text in stored)  # never stored

    viewer = Client(HTTP_AUTHORIZATION=f"Bearer {create_api_token(victor, team_a, 'v').secret}")
    browser = Client()
    browser.force_login(victor)
    shown = {
        "api logs": str(viewer.get(f"/api/runs/{run.pk}/logs/").json()["results"]),
        "api events": str(viewer.get(f"/api/runs/{run.pk}/events/").json()["events"]),
        "full log page": browser.get(f"/runs/{run.pk}/log/").content.decode(),
        "run page snapshot": str(run_snapshot(run)["logs"]),
    }
    for where, text in shown.items():
        assert PASSWORD not in text, where
        assert "redis://***@redis.internal:6379/0" in text, where


@pytest.mark.django_db
def test_live_events_reach_the_page_redacted_and_with_relative_paths(run, settings):
    """What ingest publishes to the run's sockets (ingest.publish_events), read off the run's group."""
    from asgiref.sync import async_to_sync
    from channels.layers import channel_layers, get_channel_layer

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(run.pk), channel)
    events = [log_event(run, 2, [f"again {EVENTS_URL} in {run.run_dir}/logs"]),
              {"v": 1, "type": "checkpoint", "run_id": str(run.pk), "seq": 3, "step": 6, "time": 1.0, "attempt": 1,
               "data": {"step": 6, "path": str(run.run_dir / "checkpoints" / "step_6")}}]
    try:
        publish_events(run.pk, events, 3)
        sent = async_to_sync(layer.receive)(channel)["events"]
    finally:
        channel_layers.backends.clear()
    assert sent[0]["data"]["lines"] == ["again redis://***@redis.internal:6379/0 in <run_dir>/logs"]
    assert sent[1]["data"]["path"] == "checkpoints/step_6"


@pytest.mark.django_db
def test_checkpoint_listings_show_paths_relative_to_the_run_directory(run, alice, team_a):
    saved = Checkpoint.objects.create(run=run, step=4, path=str(run.run_dir / "checkpoints" / "step_4"), seq=1,
                                      created_at=run.created_at)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {create_api_token(alice, team_a, 'a').secret}")
    listed = api.get(f"/api/runs/{run.pk}/checkpoints/").json()["results"]
    assert [c["path"] for c in listed] == ["checkpoints/step_4"]
    assert checkpoint_dict(saved)["path"] == "checkpoints/step_4"  # the run page's table and its replays


@pytest.mark.django_db
def test_run_messages_and_logs_show_server_paths_relative(run, settings):
    other = run.run_dir.parent / "run-999" / "checkpoints" / "step_2"
    write_run_state(run.pk, message=f"training refused: '{run.run_dir}/models/tiny' is outside; '{other}' too")
    run.refresh_from_db()
    assert run.message == "training refused: '<run_dir>/models/tiny' is outside; '<runs>/run-999/checkpoints/step_2' too"
    line = LogLine.objects.create(run=run, attempt=1, seq=-1, line_no=0, level="driver", time=1.0,
                                  text=f'File "{settings.POLICYLAB_TRAINER_WORKDIR}/trainer/cli.py", line 3: '
                                       f"{run.run_dir}/events.jsonl")
    shown = run_snapshot(run)["logs"][0]["text"]
    assert shown == 'File "./trainer/cli.py", line 3: <run_dir>/events.jsonl', line.text


@pytest.mark.django_db
def test_path_errors_name_the_read_folders_relative_to_the_working_directory(api_alice, demo_yaml, settings):
    workdir = settings.POLICYLAB_TRAINER_WORKDIR
    assert any(root.startswith(workdir + "/") for root in settings.POLICYLAB_READ_ROOTS)
    config = demo_yaml.replace("pretrain: tiny://tiny?seed=0", "pretrain: /etc/secret-model")
    errors = api_alice.post("/api/configs/validate/", {"config": config}, format="json").json()["errors"]
    outside = [e["message"] for e in errors if "outside the folders runs may read" in e["message"]]
    assert outside, errors
    for message in outside:
        assert workdir not in message, message
        assert "./examples" in message and "/etc/secret-model" in message
