"""The websocket of a run page: a snapshot (or a replay after `?after_seq=N`), then live events."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from policylab.tracking.ingest import group_name
from policylab.tracking.selectors import events_after, run_for_user, run_snapshot

CLOSE_NOT_FOUND = 4404


def initial_message(user: Any, run_id: int, after_seq: int | None) -> dict[str, Any] | None:
    """None when the user may not see the run; else a replay (when possible) or a snapshot."""
    run = run_for_user(user, run_id)
    if run is None:
        return None
    if after_seq is not None:
        replay = events_after(run, after_seq)
        if replay is not None:
            return replay
    return run_snapshot(run)


class RunConsumer(AsyncJsonWebsocketConsumer):
    """Joins the group before reading the database, so nothing committed in between is missed;
    live events at or below the snapshot's seq were already in it and are dropped (no duplicate)."""

    async def connect(self) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.sent_seq = None
        after = parse_qs(self.scope.get("query_string", b"").decode()).get("after_seq", [None])[0]
        after_seq = int(after) if after is not None and after.lstrip("-").isdigit() else None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = group_name(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        message = await database_sync_to_async(initial_message)(user, self.run_id, after_seq)
        if message is None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.accept()
        await self.send_json(message)
        self.sent_seq = message["seq"]

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs) -> None:
        """The page only listens; pings keep proxies from closing an idle socket."""
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def run_events(self, message: dict[str, Any]) -> None:
        if self.sent_seq is None:
            return
        fresh = [e for e in message["events"] if e["seq"] > self.sent_seq]
        if fresh:
            await self.send_json({"type": "events", "seq": max(e["seq"] for e in fresh), "events": fresh})
