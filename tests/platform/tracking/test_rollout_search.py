"""Rollout search (issue 34, finding 4): `GET /api/runs/N/rollouts/?q=` took the user's regular expression,
and `.*` x16 then `Z` cost 14 s of CPU for 128 samples (hours for 2,048), with no timeout and no end when
the client left. The search is now plain text (any case), its queries are bounded in time, and they stop
when the client disconnects."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from policylab.tracking.models import RolloutSample

pytestmark = pytest.mark.django_db
PATHOLOGICAL = ".*" * 16 + "Z"
WORDS = ["".join(letters) for letters in itertools.product("abcde", repeat=3)] + ["bad", "Bad", "BAD"]  # 128


@pytest.fixture
def searchable(make_run, user) -> tuple[Client, str]:
    """128 samples of the demo's copy task ("copy bad" -> "bad"), and a client of their team's member."""
    run = make_run(user=user)
    RolloutSample.objects.bulk_create(
        RolloutSample(run=run, step=1 + i // 16, group_id=i // 8, sample_index=i % 8, prompt=f"copy {word}",
                      response=word, seq=1 + i // 16, time=0.0)
        for i, word in enumerate(WORDS)
    )
    client = Client()
    client.force_login(user)
    return client, reverse("tracking:api-rollouts", args=[run.pk])


def test_a_pathological_pattern_is_answered_in_under_a_second(searchable):
    client, url = searchable
    assert len(WORDS) == 128
    start = time.perf_counter()
    answer = client.get(url, {"q": PATHOLOGICAL})
    elapsed = time.perf_counter() - start
    assert answer.status_code == 200 and answer.json()["count"] == 0  # no sample holds that text
    assert elapsed < 1.0, f"took {elapsed:.1f} s"


@pytest.mark.parametrize("text", ["bad", "BAD", "copy b", "Y C", "e", "copy abc"])
def test_plain_text_finds_what_it_found_in_prompt_or_response_ignoring_case(searchable, text):
    client, url = searchable
    expected = sum(text.lower() in f"copy {w}".lower() or text.lower() in w.lower() for w in WORDS)
    answer = client.get(url, {"q": text, "page_size": 500}).json()
    assert answer["count"] == expected > 0
    assert all(text.lower() in (r["prompt"] + "\n" + r["response"]).lower() for r in answer["results"])


def slow_sql() -> str:
    """A statement that runs for a minute or more on this database."""
    if connection.vendor == "postgresql":
        return "SELECT pg_sleep(60)"
    return ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000) "
            "SELECT count(*) FROM c")


def stopped(seconds: float, gone: threading.Event | None = None) -> tuple[Exception, float]:
    from policylab.query_budget import QueryStopped, query_budget

    start = time.perf_counter()
    with (pytest.raises(QueryStopped) as raised, transaction.atomic(), query_budget(seconds, gone),
          connection.cursor() as cursor):
        cursor.execute(slow_sql())
    return raised.value, time.perf_counter() - start


def test_a_query_past_its_budget_is_stopped():
    error, elapsed = stopped(0.3)
    assert error.reason == "time" and elapsed < 2.0
    with connection.cursor() as cursor:  # the connection is still usable
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def test_a_query_is_stopped_when_its_client_goes_away():
    gone = threading.Event()
    threading.Timer(0.3, gone.set).start()
    error, elapsed = stopped(60.0, gone)
    assert error.reason == "client gone" and elapsed < 2.0


def test_a_query_inside_its_budget_is_left_alone():
    from policylab.query_budget import query_budget

    with query_budget(5.0, threading.Event()), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def test_a_search_over_budget_answers_400_naming_why(searchable, monkeypatch):
    from policylab.api import tracking_views as api
    from policylab.query_budget import QueryStopped

    @contextlib.contextmanager
    def over_budget(seconds, gone):
        yield
        raise QueryStopped("time", seconds)

    monkeypatch.setattr(api, "query_budget", over_budget)
    client, url = searchable
    answer = client.get(url, {"q": "bad"})
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["field"] == "q" and "took longer than 5 s" in answer.json()["errors"][0]["message"]


def test_the_http_stack_marks_a_request_whose_client_disconnected():
    from policylab.asgi import application
    from policylab.query_budget import CLIENT_GONE_KEY, ClientGone

    assert isinstance(application.application_mapping["http"], ClientGone)
    seen: dict = {}

    async def view(scope, receive, send):  # reads its body, then waits as Django's disconnect listener does
        seen["event"] = scope[CLIENT_GONE_KEY]
        await receive()
        seen["before"] = seen["event"].is_set()
        await receive()
        seen["after"] = seen["event"].is_set()

    async def run() -> None:
        app = ApplicationCommunicator(ClientGone(view), {"type": "http", "method": "GET", "path": "/", "headers": []})
        await app.send_input({"type": "http.request", "body": b"", "more_body": False})
        await app.send_input({"type": "http.disconnect"})
        await app.wait(timeout=2)

    async_to_sync(run)()
    assert seen == {"event": seen["event"], "before": False, "after": True}
