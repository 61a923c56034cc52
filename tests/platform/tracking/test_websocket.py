"""The run websocket over the real ASGI stack and the real Redis channel layer."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from policylab.asgi import application
from policylab.tracking.ingest import ingest_events
from tests.platform.tracking.conftest import event
from tests.platform.tracking.test_ingest import run_events

pytestmark = pytest.mark.django_db(transaction=True)


def session_headers(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [(b"cookie", cookie.encode()), *ANONYMOUS]


# a browser's handshake: its Host, and the page's Origin (the same scheme, host and port)
ANONYMOUS = [(b"host", b"testserver"), (b"origin", b"http://testserver")]


def communicator(run_id: int, headers: list, query: str = "") -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/runs/{run_id}/{query}", headers=headers)


async def receive_until(comm: WebsocketCommunicator, predicate, timeout: float = 5.0) -> list[dict]:
    """Messages until predicate(all so far) holds."""
    got: list[dict] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate(got):
        got.append(await comm.receive_json_from(timeout=max(0.05, deadline - loop.time())))
    return got


def reward_steps(messages: list[dict]) -> list[int]:
    return [e["step"] for m in messages for e in m.get("events", []) if e["type"] == "metrics"]


def test_snapshot_then_live_events_then_resume_after_seq_without_gap_or_duplicate(make_run, user) -> None:
    async_to_sync(snapshot_live_resume)(make_run(user=user), session_headers(user))


async def snapshot_live_resume(run, headers) -> None:
    events = run_events(run.pk, steps=6)
    cut = next(i for i, e in enumerate(events) if e["type"] == "checkpoint") + 1  # through step 3's checkpoint
    first, later, missed = events[:cut], events[cut : cut + 9], events[cut + 9 :]
    await database_sync_to_async(ingest_events)(first)

    comm = communicator(run.pk, headers)
    connected, _ = await comm.connect()
    assert connected
    frames = await receive_until(comm, lambda got: got and "seq" in got[-1])
    snapshot, series = frames[0], [f for f in frames[1:] if f["type"] == "series"]
    assert snapshot["type"] == "snapshot" and frames[-1]["seq"] == first[-1]["seq"]
    assert {f["source"] for f in series} == {"series", "system"}
    metric_series = {k: v for f in series if f["source"] == "series" for k, v in f["series"].items()}
    assert metric_series["reward/mean"]["step"] == [1, 2, 3]
    assert snapshot["checkpoints"][0]["step"] == 3 and snapshot["rollouts"][0]["step"] == 3
    assert snapshot["run"]["status"] == "running"

    await database_sync_to_async(ingest_events)(later)
    live = await receive_until(comm, lambda got: any(m["seq"] >= later[-1]["seq"] for m in got))
    assert reward_steps(live) == [4, 5]
    assert all(m["type"] == "events" for m in live)
    last_seen = max(m["seq"] for m in live)
    await comm.disconnect()

    # Events stored while the page was away are replayed exactly once on reconnect.
    await database_sync_to_async(ingest_events)(missed)
    comm = communicator(run.pk, headers, f"?after_seq={last_seen}")
    assert (await comm.connect())[0]
    replay = await comm.receive_json_from(timeout=5)
    assert replay["type"] == "replay"
    seqs = [e["seq"] for e in replay["events"]]
    stored_after = [e["seq"] for e in missed if e["type"] != "status"]
    assert seqs == stored_after  # no gap, no duplicate, in order
    assert reward_steps([replay]) == [6]
    assert replay["run"]["step"] == 6
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


def test_other_teams_and_anonymous_users_cannot_subscribe(make_run, user, other_user) -> None:
    run = make_run("alpha", user=user)
    make_run("beta", user=other_user)
    async_to_sync(team_isolation)(run, session_headers(user), session_headers(other_user))


async def team_isolation(run, owner_headers, outsider_headers) -> None:
    outsider = communicator(run.pk, outsider_headers)
    assert (await outsider.connect())[0] is False
    anonymous = communicator(run.pk, ANONYMOUS)
    assert (await anonymous.connect())[0] is False
    # The owner still gets in, and the outsider never received the run's events.
    owner = communicator(run.pk, owner_headers)
    assert (await owner.connect())[0]
    await receive_until(owner, lambda got: got and "seq" in got[-1])
    await database_sync_to_async(ingest_events)([event("metrics", run.pk, 1, 1, {"values": {"reward/mean": 1.0}})])
    message = await owner.receive_json_from(timeout=5)
    assert message["events"][0]["data"]["values"] == {"reward/mean": 1.0}
    await owner.disconnect()


def test_an_idle_socket_stays_subscribed(make_run, user) -> None:
    """channels-redis blocks 5 s per receive; redis-py's default 5 s read timeout used to kill it."""
    run = make_run(user=user)
    async_to_sync(idle_then_event)(run, session_headers(user))


async def idle_then_event(run, headers) -> None:
    comm = communicator(run.pk, headers)
    assert (await comm.connect())[0]
    await receive_until(comm, lambda got: got and "seq" in got[-1])
    assert await comm.receive_nothing(timeout=6.5)
    await database_sync_to_async(ingest_events)([event("metrics", run.pk, 1, 1, {"values": {"reward/mean": 2.0}})])
    message = await comm.receive_json_from(timeout=5)
    assert message["events"][0]["data"]["values"] == {"reward/mean": 2.0}
    await comm.disconnect()


def test_large_snapshots_and_replays_are_split_below_the_frame_limit() -> None:
    from policylab.tracking.consumers import split_replay, split_snapshot

    points = {"x": list(range(500)), "y": [0.5] * 500, "step": list(range(500)), "time": [1.0] * 500}
    snapshot = {"type": "snapshot", "seq": 42, "run": {}, "series": {f"actor/k{i}": points for i in range(100)},
                "system": {"cpu/percent": points}, "rollouts": [], "checkpoints": [], "logs": []}
    frames = split_snapshot(snapshot)
    assert all(len(json.dumps(f)) < 1_000_000 for f in frames) and len(frames) > 2
    assert [f.get("seq") for f in frames] == [None] * (len(frames) - 1) + [42]  # seq only when complete
    merged = {k: v for f in frames[1:] if f["source"] == "series" for k, v in f["series"].items()}
    assert merged == snapshot["series"]
    events = [{"type": "metrics", "seq": s, "step": s, "time": 0.0, "attempt": 1,
               "data": {"values": {f"k{i}": 1.0 for i in range(100)}}} for s in range(1, 201)]
    replay = split_replay({"type": "replay", "seq": 200, "run": {}, "events": events})
    assert [e["seq"] for f in replay for e in f["events"]] == list(range(1, 201))
    assert "seq" not in replay[0] and replay[-1]["seq"] == 200
    assert all(len(json.dumps(f)) < 1_000_000 for f in replay)


def test_a_live_rollouts_event_shows_samples_as_the_api_and_a_replay_do(make_run, user) -> None:
    """Issue 42: a sample has one shape (selectors.rollout_dict without token arrays): the live frame carried the
    trainer's raw sample before (no id, prompt_hash, attempt or frames_url), now the stored row."""
    async_to_sync(live_rollouts_shape)(make_run(user=user), session_headers(user))


async def live_rollouts_shape(run, headers) -> None:
    from policylab.tracking.selectors import rebuild_events

    comm = communicator(run.pk, headers)
    assert (await comm.connect())[0]
    await receive_until(comm, lambda got: got and "seq" in got[-1])
    sample = {"group_id": 0, "sample_index": 0, "prompt": "2+2?", "response": "4", "reward": 1.0, "advantage": 0.5,
              "prompt_length": 3, "response_length": 1, "stop_reason": "stop", "tokens": ["4"]}
    await database_sync_to_async(ingest_events)([event("rollouts", run.pk, 1, 1, {"samples": [sample]})])
    live = await receive_until(comm, lambda got: any(m.get("type") == "events" for m in got))
    shown = next(e for m in live if m.get("type") == "events" for e in m["events"] if e["type"] == "rollouts")
    replayed = await database_sync_to_async(rebuild_events)(run, 0, 1)
    assert shown["data"]["samples"] == replayed[0]["data"]["samples"]
    assert {"id", "prompt_hash", "attempt", "frames_url"} <= set(shown["data"]["samples"][0])
    await comm.disconnect()
