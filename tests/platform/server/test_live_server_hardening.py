"""Issue 34 against the real server (daphne, as production runs it) with a real websocket client:

- open websockets close (4403) within seconds once access is removed: a revoked token, a deleted
  membership; by the signal alone, and by the periodic re-check alone;
- the websocket Origin check compares scheme, host AND port;
- a websocket to a path with no route is refused cleanly, without a 500 or a traceback;
- a 100 MB chunked body is refused with 413 while the server process grows by less than 20 MB.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import psutil
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from policylab.accounts.models import ApiToken, Membership, Role, Team
from policylab.accounts.services import create_api_token, revoke_api_token
from policylab.experiments.models import Experiment, Project, Run, RunStatus
from policylab.tracking.broadcast import publish_run_state

CLOSED_WITHIN_S = 5.0
ACCESS_REMOVED = 4403  # tracking.access: the policy violation, after HTTP's 403
MIB = 2**20


@pytest.fixture
def member(transactional_db) -> dict[str, Any]:
    """ada, a member of team "alpha" with a running run, an API token and a browser session."""
    user = get_user_model().objects.create_user("ada", password="pw-ada-123456")
    team = Team.objects.create(name="Alpha", slug="alpha")
    Membership.objects.create(user=user, team=team, role=Role.VIEWER)  # viewers watch runs too
    project = Project.objects.create(team=team, name="proj")
    experiment = Experiment.objects.create(project=project, name="exp", config={"exp_name": "x"}, config_yaml="",
                                           config_hash="h")
    run = Run.objects.create(experiment=experiment, status=RunStatus.RUNNING)
    issued = create_api_token(user, team, "script")
    browser = Client()
    browser.force_login(user)
    return {"user": user, "team": team, "run": run, "token": issued.token, "secret": issued.secret,
            "session": browser.cookies[settings.SESSION_COOKIE_NAME].value}


def open_socket(server, path: str, *, secret: str | None = None, session: str | None = None,
                origin: str | None = "same") -> ClientConnection:
    headers = {}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    if session:
        headers["Cookie"] = f"{settings.SESSION_COOKIE_NAME}={session}"
    return connect(server.ws + path, additional_headers=headers, origin=server.url if origin == "same" else origin,
                   proxy=None, open_timeout=10)


def snapshot(ws: ClientConnection) -> list[dict]:
    frames = [json.loads(ws.recv(timeout=10))]
    while "seq" not in frames[-1]:
        frames.append(json.loads(ws.recv(timeout=10)))
    return frames


def closed_within(ws: ClientConnection, seconds: float) -> tuple[int | None, float, list[dict]]:
    """(close code or None if still open after `seconds`, seconds waited, frames received meanwhile)."""
    start = time.monotonic()
    frames = []
    try:
        while (left := seconds - (time.monotonic() - start)) > 0:
            frames.append(json.loads(ws.recv(timeout=left)))
    except TimeoutError:
        return None, time.monotonic() - start, frames
    except ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd else None), time.monotonic() - start, frames
    return None, time.monotonic() - start, frames


def streams_live(ws: ClientConnection, run: Run) -> None:
    """The socket is live: a state change of the run (written as the supervisor would) reaches it."""
    publish_run_state(run.pk)
    frame = json.loads(ws.recv(timeout=10))
    assert frame["type"] == "run" and frame["run"]["id"] == run.pk


# --- 5: access removed -> open sockets close -----------------------------------------------------------


def test_a_revoked_token_closes_its_open_socket_within_seconds(start_server, member):
    server = start_server()
    with open_socket(server, f"/ws/runs/{member['run'].pk}/", secret=member["secret"], origin=None) as ws:
        snapshot(ws)
        streams_live(ws, member["run"])
        revoke_api_token(member["token"])
        code, seconds, frames = closed_within(ws, CLOSED_WITHIN_S)
    assert code == ACCESS_REMOVED, f"still open {seconds:.1f} s after the revocation"
    assert frames == []


def test_a_deleted_membership_closes_the_browsers_open_socket_within_seconds(start_server, member):
    server = start_server()
    with open_socket(server, f"/ws/runs/{member['run'].pk}/", session=member["session"]) as ws:
        snapshot(ws)
        streams_live(ws, member["run"])
        Membership.objects.filter(user=member["user"], team=member["team"]).delete()
        code, seconds, _ = closed_within(ws, CLOSED_WITHIN_S)
    assert code == ACCESS_REMOVED, f"still open {seconds:.1f} s after the membership was deleted"


def test_the_signal_alone_closes_sockets_at_once(start_server, member):
    """The periodic re-check is off (10 minutes): the membership's deletion tells the user's sockets."""
    server = start_server(POLICYLAB_WS_ACCESS_RECHECK_S="600")
    path = f"/ws/runs/{member['run'].pk}/"
    with open_socket(server, path, secret=member["secret"], origin=None) as by_token, \
            open_socket(server, path, session=member["session"]) as by_session:
        snapshot(by_token)
        snapshot(by_session)
        member["team"].memberships.get(user=member["user"]).delete()
        results = [closed_within(ws, 2.0) for ws in (by_token, by_session)]
    assert [code for code, _, _ in results] == [ACCESS_REMOVED, ACCESS_REMOVED], results


def test_the_timer_alone_closes_a_socket_whose_token_was_revoked_without_a_signal(start_server, member):
    """A revocation written by a queryset update sends no signal: the periodic re-check (2 s) finds it."""
    server = start_server()
    with open_socket(server, f"/ws/runs/{member['run'].pk}/", secret=member["secret"], origin=None) as ws:
        snapshot(ws)
        ApiToken.objects.filter(pk=member["token"].pk).update(revoked_at=timezone.now())
        code, seconds, _ = closed_within(ws, CLOSED_WITHIN_S)
    assert code == ACCESS_REMOVED, f"still open {seconds:.1f} s after the revocation"


def test_a_socket_whose_access_holds_stays_open(start_server, member):
    server = start_server(POLICYLAB_WS_ACCESS_RECHECK_S="0.5")
    with open_socket(server, f"/ws/runs/{member['run'].pk}/", session=member["session"]) as ws:
        snapshot(ws)
        code, _, _ = closed_within(ws, 2.0)  # four re-checks
        assert code is None
        streams_live(ws, member["run"])


# --- 8: the Origin check compares scheme, host and port ------------------------------------------------


def handshake_status(server, path: str, **kwargs: Any) -> int:
    """101 when the socket opened (then closed by us), else the HTTP status the handshake got."""
    try:
        with open_socket(server, path, **kwargs) as ws:
            snapshot(ws) if "/ws/runs/" in path else None
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


def test_a_session_from_another_port_scheme_or_host_is_refused(start_server, member):
    server = start_server()
    path = f"/ws/runs/{member['run'].pk}/"
    for origin in ("http://127.0.0.1:9999", f"https://127.0.0.1:{server.port}", f"http://localhost:{server.port}",
                   "http://127.0.0.1", "null", None):
        assert handshake_status(server, path, session=member["session"], origin=origin) == 403, origin
    assert handshake_status(server, path, session=member["session"]) == 101  # the page's own origin
    assert handshake_status(server, path, session=member["session"], origin=f"HTTP://127.0.0.1:{server.port}") == 101


def test_an_origin_listed_in_csrf_trusted_origins_is_accepted(start_server, member):
    server = start_server(DJANGO_CSRF_TRUSTED_ORIGINS="https://dashboard.example")
    path = f"/ws/runs/{member['run'].pk}/"
    assert handshake_status(server, path, session=member["session"], origin="https://dashboard.example") == 101
    assert handshake_status(server, path, session=member["session"], origin="https://dashboard.example:8443") == 403


# --- 11: a websocket to a path with no route ----------------------------------------------------------


def test_a_websocket_to_a_path_with_no_route_is_refused_without_a_traceback(start_server, member):
    server = start_server()
    for path in ("/ws/nope/", "/ws/runs/abc/", f"/ws/runs/{member['run'].pk}/extra/", "/"):
        assert handshake_status(server, path, secret=member["secret"], origin=None) == 403, path
        assert handshake_status(server, path, session=member["session"]) == 403, path
    log = server.log()
    assert "Traceback" not in log and "No route found" not in log and " 500 " not in log, log[-3000:]
    assert handshake_status(server, f"/ws/runs/{member['run'].pk}/", secret=member["secret"], origin=None) == 101


# --- 6: request bodies capped whatever the transfer encoding -------------------------------------------


def post_raw(server, head: str, body_chunks, *, read_timeout: float = 30.0) -> bytes:
    """Send `head` then the chunks (stopping when the server closes), reading the answer concurrently."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=read_timeout)
    answer: list[bytes] = []

    def read() -> None:
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
                if b"\r\n\r\n" in data and len(data) > data.index(b"\r\n\r\n") + 4:
                    break
        except OSError:
            pass
        answer.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        sock.sendall(head.encode())
        for chunk in body_chunks:
            sock.sendall(chunk)
    except OSError:  # the server answered and closed: the rest is never read
        pass
    reader.join(read_timeout)
    sock.close()
    return answer[0] if answer else b""


def chunked(total: int, size: int = MIB):
    sent = 0
    while sent < total:
        piece = b"a" * min(size, total - sent)
        sent += len(piece)
        yield b"%x\r\n" % len(piece) + piece + b"\r\n"
    yield b"0\r\n\r\n"


def test_a_100_mb_chunked_body_is_refused_before_the_server_grows(start_server, member):
    server = start_server()
    process = psutil.Process(server.pid)
    assert post_raw(server, f"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                    "Connection: close\r\n\r\n", []).startswith(b"HTTP/1.1 200")  # warm: Django loaded
    before = process.memory_info().rss
    peak = [before]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], process.memory_info().rss)

    watcher = threading.Thread(target=watch)
    watcher.start()
    head = (f"POST /editor/check/ HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nTransfer-Encoding: chunked\r\n"
            f"Content-Type: application/x-www-form-urlencoded\r\nCookie: {settings.SESSION_COOKIE_NAME}="
            f"{member['session']}\r\n\r\n")
    start = time.monotonic()
    answer = post_raw(server, head, chunked(100 * MIB))
    seconds = time.monotonic() - start
    time.sleep(0.5)
    done.set()
    watcher.join()
    growth = max(peak[0], process.memory_info().rss) - before
    assert growth < 20 * MIB, f"the server grew by {growth / MIB:.0f} MiB"
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert f"larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes".encode() in answer
    assert seconds < 10


def test_a_declared_length_past_the_limit_is_refused_before_the_body_is_sent(start_server, member):
    server = start_server()
    head = (f"POST /api/configs/validate/ HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Length: {100 * MIB}"
            f"\r\nContent-Type: application/json\r\nAuthorization: Bearer {member['secret']}\r\n"
            "Expect: 100-continue\r\n\r\n")
    answer = post_raw(server, head, [], read_timeout=10)
    assert answer.startswith(b"HTTP/1.1 413") and b"100 Continue" not in answer, answer[:300]
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["errors"][0]["message"] == f"request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"


def test_a_small_chunked_body_still_reaches_the_api(start_server, member):
    server = start_server()
    payload = json.dumps({"config": "exp_name: x\nmax_steps: 3\n"}).encode()
    head = (f"POST /api/configs/validate/ HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nTransfer-Encoding: chunked\r\n"
            f"Content-Type: application/json\r\nAuthorization: Bearer {member['secret']}\r\nConnection: close\r\n\r\n")
    answer = post_raw(server, head, [b"%x\r\n" % len(payload) + payload + b"\r\n", b"0\r\n\r\n"])
    status = answer.split(b" ", 2)[1]
    assert status in (b"200", b"400"), answer[:500]  # the validator's answer, not a size refusal
    assert b'"errors"' in answer or b'"ok"' in answer
