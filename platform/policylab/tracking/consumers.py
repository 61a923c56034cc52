"""The websocket of a run page (or a script with an API token): a snapshot (or a replay after `?after_seq=N`),
then live events and `run` frames carrying the run's state each time it changes, for as long as the
connection may still see the run (tracking.access: closed with 4403 once it may not)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from policylab.ids import parse_id
from policylab.tracking.access import CLOSE_ACCESS_REMOVED, access_group, may_watch
from policylab.tracking.broadcast import group_name
from policylab.tracking.ingest import chunk_events
from policylab.tracking.selectors import events_after, run_for_user, run_snapshot

CLOSE_NOT_FOUND = 4404
CLOSE_UNAUTHENTICATED = 4401  # no session and no valid API token (accounts.websocket)
FRAME_BYTES = 300_000  # rough JSON size of one series frame
log = logging.getLogger(__name__)


def parse_after_seq(text: str | None) -> int | None:
    """`?after_seq=N` (-1: nothing seen yet); anything else, a number past 64 bits included, gets
    a snapshot (int() of a 5,000-digit string raises; "²".isdigit() is True)."""
    if text is None:
        return None
    value = parse_id(text.removeprefix("-"))
    if value is None:
        return None
    return -value if text.startswith("-") else value


def initial_messages(user: Any, run_id: int, after_seq: int | None, lazy: bool = False) -> list[dict[str, Any]] | None:
    """None when the user may not see the run; else a replay (when possible) or a snapshot, split
    into frames below the server's websocket size limit (daphne: 1 MiB). Only the last frame carries
    `seq`, so a client cut off half-way resumes from what it really has. `lazy` (`?series=lazy`, the run
    and compare pages): the snapshot carries the metric keys, not their series."""
    run = run_for_user(user, run_id)
    if run is None:
        return None
    if after_seq is not None:
        replay = events_after(run, after_seq)
        if replay is not None:
            return split_replay(replay)
    return split_snapshot(run_snapshot(run, lazy=lazy))


def split_replay(replay: dict[str, Any]) -> list[dict[str, Any]]:
    frames = [{**replay, "events": chunk} for chunk in chunk_events(replay["events"])] or [{**replay, "events": []}]
    for frame in frames[:-1]:
        frame.pop("seq")
    return frames


def split_snapshot(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    head = {**snapshot, "series": {}, "system": {}}
    frames = [head]
    for source in ("series", "system"):
        part: dict[str, Any] = {}
        size = 0
        for key, points in snapshot[source].items():
            part[key] = points
            size += 40 * len(points["x"]) + len(key)
            if size >= FRAME_BYTES:
                frames.append({"type": "series", "source": source, "series": part})
                part, size = {}, 0
        if part:
            frames.append({"type": "series", "source": source, "series": part})
    seq = head.pop("seq")
    frames[-1]["seq"] = seq
    return frames


class RunConsumer(AsyncJsonWebsocketConsumer):
    """Joins the groups before reading the database, so nothing committed in between is missed (an event,
    an access change); live events at or below the snapshot's seq were already in it and are dropped (no
    duplicate). While open, it re-checks access on every `access.changed` and on a timer."""

    async def connect(self) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.sent_seq = None
        self.closing = False
        self.watcher: asyncio.Task | None = None
        query = parse_qs(self.scope.get("query_string", b"").decode())
        after_seq = parse_after_seq(query.get("after_seq", [None])[0])
        lazy = query.get("series", [""])[0] == "lazy"
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.group = group_name(self.run_id)
        self.access_group = access_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.channel_layer.group_add(self.access_group, self.channel_name)
        messages = await database_sync_to_async(initial_messages)(user, self.run_id, after_seq, lazy)
        if messages is None:
            await self.leave_groups()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.accept()
        for message in messages:
            await self.send_json(message)
        self.sent_seq = messages[-1]["seq"]
        self.watcher = asyncio.create_task(self.recheck_every(settings.POLICYLAB_WS_ACCESS_RECHECK_S))

    async def disconnect(self, code: int) -> None:
        if self.watcher is not None:
            self.watcher.cancel()
        await self.leave_groups()

    async def leave_groups(self) -> None:
        for group in (getattr(self, "group", None), getattr(self, "access_group", None)):
            if group:
                await self.channel_layer.group_discard(group, self.channel_name)

    async def recheck_every(self, period: float) -> None:
        while not self.closing:
            await asyncio.sleep(period)
            await self.recheck()

    async def recheck(self) -> None:
        """Close with 4403 once the connection may no longer see the run (tracking.access)."""
        if self.closing:
            return
        try:
            allowed = await database_sync_to_async(may_watch)(self.scope, self.run_id)
        except Exception:  # the database is unreachable: keep the socket, ask again on the next tick
            log.warning("run %s: re-checking a socket's access failed", self.run_id, exc_info=True)
            return
        if not allowed and not self.closing:
            self.closing = True
            await self.close(code=CLOSE_ACCESS_REMOVED)

    async def access_changed(self, message: dict[str, Any]) -> None:
        """A token of the user was revoked, a membership removed, the user deactivated or signed out."""
        await self.recheck()

    async def receive_json(self, content: Any, **kwargs) -> None:
        """The page only listens; pings keep proxies from closing an idle socket."""
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def run_events(self, message: dict[str, Any]) -> None:
        if self.sent_seq is None or self.closing:
            return
        fresh = [e for e in message["events"] if e["seq"] > self.sent_seq]
        if fresh:
            await self.send_json({"type": "events", "seq": max(e["seq"] for e in fresh), "events": fresh})

    async def run_logs(self, message: dict[str, Any]) -> None:
        """Log lines stored outside trainer events (the Ray driver's output; broadcast.publish_log_lines): they
        have no place in the seq order, so the page keys them by (seq, line_no) and drops what it has."""
        if self.sent_seq is not None and not self.closing:
            await self.send_json({"type": "logs", "lines": message["lines"]})

    async def run_state(self, message: dict[str, Any]) -> None:
        """The run's state after a change (experiments.run_state); the client keeps the highest version."""
        if self.sent_seq is not None and not self.closing:
            await self.send_json({"type": "run", "run": message["run"]})
