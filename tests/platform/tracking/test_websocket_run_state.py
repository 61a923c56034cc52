"""The run websocket for script clients (API tokens) and the `run` frames that carry the run's state,
over the real ASGI stack and the real Redis channel layer."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from policylab.accounts.models import Team
from policylab.accounts.services import create_api_token
from policylab.asgi import application
from policylab.experiments.models import RunStatus
from policylab.experiments.run_state import write_run_state
from policylab.tracking.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from tests.platform.tracking.test_websocket import receive_until, session_headers

pytestmark = pytest.mark.django_db(transaction=True)


def token_of(user, slug: str) -> str:
    return create_api_token(user, Team.objects.get(slug=slug), "ws").secret


async def close_code(path: str, headers: list) -> int | None:
    comm = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await comm.connect()
    await comm.disconnect()
    return None if connected else code


def test_a_token_opens_the_socket_without_a_browser_origin(make_run, user, other_user) -> None:
    mine = make_run("alpha", user=user)
    theirs = make_run("beta", user=other_user)
    make_run("gamma", user=user)  # a second team of the user: the token acts in one team only
    secret = token_of(user, "alpha")
    other_team_secret = token_of(user, "gamma")
    async_to_sync(token_checks)(mine, theirs, secret, other_team_secret)


async def token_checks(mine, theirs, secret: str, other_team_secret: str) -> None:
    bearer = [(b"authorization", f"Bearer {secret}".encode())]  # no Origin header: a script, not a page
    comm = WebsocketCommunicator(application, f"/ws/runs/{mine.pk}/", headers=bearer)
    assert (await comm.connect())[0]
    frames = await receive_until(comm, lambda got: got and "seq" in got[-1])
    assert frames[0]["type"] == "snapshot" and frames[0]["run"]["id"] == mine.pk
    await comm.disconnect()
    assert await close_code(f"/ws/runs/{mine.pk}/?token={secret}", []) is None  # where headers cannot be set
    assert await close_code(f"/ws/runs/{theirs.pk}/", bearer) == CLOSE_NOT_FOUND  # another team's run
    other_team = [(b"authorization", f"Bearer {other_team_secret}".encode())]
    assert await close_code(f"/ws/runs/{mine.pk}/", other_team) == CLOSE_NOT_FOUND  # the token's team only
    assert await close_code(f"/ws/runs/{mine.pk}/?token=plk_wrong", []) == CLOSE_UNAUTHENTICATED


def test_a_session_still_needs_an_allowed_origin(make_run, user) -> None:
    run = make_run(user=user)
    cookie_only = [h for h in session_headers(user) if h[0] != b"origin"]
    async_to_sync(origin_checks)(run, cookie_only, session_headers(user))


async def origin_checks(run, cookie_only: list, with_origin: list) -> None:
    assert await close_code(f"/ws/runs/{run.pk}/", cookie_only) is not None
    assert await close_code(f"/ws/runs/{run.pk}/", [*cookie_only, (b"origin", b"http://evil.example")]) is not None
    assert await close_code(f"/ws/runs/{run.pk}/", with_origin) is None


def test_every_state_change_reaches_the_socket_with_a_growing_version(make_run, user) -> None:
    run = make_run(user=user, status=RunStatus.RUNNING)
    async_to_sync(state_frames)(run, session_headers(user))


async def state_frames(run, headers) -> None:
    comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=headers)
    assert (await comm.connect())[0]
    snapshot = (await receive_until(comm, lambda got: got and "seq" in got[-1]))[0]
    assert snapshot["run"]["cancellable"] is True
    write = database_sync_to_async(write_run_state)
    await write(run.pk, status=RunStatus.CANCELLING, message="cancelling: stopping the Ray job")
    await write(run.pk, status=RunStatus.CANCELLED, message="cancelled by user")
    frames = await receive_until(comm, lambda got: len([f for f in got if f["type"] == "run"]) == 2)
    states = [f["run"] for f in frames if f["type"] == "run"]
    assert [(s["status"], s["message"]) for s in states] == [
        ("cancelling", "cancelling: stopping the Ray job"), ("cancelled", "cancelled by user")]
    assert snapshot["run"]["version"] < states[0]["version"] < states[1]["version"]
    assert states[1]["finished"] and not states[1]["cancellable"] and states[1]["resumable"]
    await comm.disconnect()
