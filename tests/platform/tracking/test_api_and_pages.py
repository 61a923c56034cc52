"""Metrics and rollouts API (scoped, validated, downsampled) and the tracking pages."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from policylab.accounts.models import Team
from policylab.accounts.services import create_api_token
from policylab.tracking.ingest import ingest_events, recount_summaries
from policylab.tracking.models import MetricPoint
from tests.platform.tracking.conftest import event
from tests.platform.tracking.test_ingest import run_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_of():
    def login(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return login


def test_metrics_are_downsampled_and_scoped_to_the_team(make_run, user, other_user, client_of) -> None:
    run = make_run(user=user)
    make_run("beta", user=other_user)
    MetricPoint.objects.bulk_create(
        MetricPoint(run=run, key="reward/mean", step=s, value=(50.0 if s == 4321 else s % 10), time=1000.0 + s, seq=s + 1)
        for s in range(10_000)
    )
    recount_summaries(run.pk)  # points written without ingest: their key list is counted from them
    url = reverse("tracking:api-metrics", args=[run.pk])
    body = client_of(user).get(url, {"keys": "reward/mean,nope", "max_points": 200}).json()
    points = body["series"]["reward/mean"]
    assert len(points["x"]) <= 200 and points["x"][0] == 0 and points["x"][-1] == 9999
    assert 50.0 in points["y"]  # the spike survives downsampling
    assert body["missing_keys"] == ["nope"] and body["keys"] == ["reward/mean"]
    by_time = client_of(user).get(url, {"x": "time", "max_points": 200}).json()["series"]["reward/mean"]
    assert by_time["x"][0] == 1000.0
    # Another team's member, anonymous users and a token of another team see nothing.
    assert client_of(other_user).get(url).status_code == 404
    assert Client().get(url).status_code in (401, 403)
    token = create_api_token(other_user, Team.objects.get(slug="beta"), "ci").secret
    assert Client().get(url, HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 404
    own = create_api_token(user, Team.objects.get(slug="alpha"), "ci").secret
    assert Client().get(url, HTTP_AUTHORIZATION=f"Bearer {own}").status_code == 200
    bad = client_of(user).get(url, {"max_points": 2, "x": "epoch"})
    assert bad.status_code == 400
    assert {e["field"] for e in bad.json()["errors"]} == {"max_points", "x"}


def test_rollouts_filter_page_and_search_plain_text(make_run, user, other_user, client_of) -> None:
    run = make_run(user=user)
    make_run("beta", user=other_user)
    ingest_events(run_events(run.pk, steps=6), publish=False)
    url = reverse("tracking:api-rollouts", args=[run.pk])
    client = client_of(user)
    page = client.get(url, {"page_size": 5}).json()
    assert page["count"] == 24 and len(page["results"]) == 5 and page["next"]
    assert page["steps"] == [1, 2, 3, 4, 5, 6] and page["stop_reasons"] == ["eos", "length"]
    filtered = client.get(url, {"step_min": 2, "step_max": 3, "reward_min": 1, "stop_reason": "eos"}).json()
    assert filtered["count"] == 4
    assert {(r["step"], r["reward"], r["stop_reason"]) for r in filtered["results"]} == {(2, 1.0, "eos"), (3, 1.0, "eos")}
    by_text = client.get(url, {"q": "ANSWER 5-1-"}).json()  # plain text, any case (issue 34: no user regex)
    assert by_text["count"] == 2 and all(r["response"].startswith("answer 5-1-") for r in by_text["results"])
    by_length = client.get(url, {"len_min": 6, "len_max": 6}).json()
    assert by_length["count"] == 12
    for literal in (r"answer 5-1-\d", "answer ([", "%", "_"):  # regex and LIKE characters are text, not patterns
        assert client.get(url, {"q": literal}).json()["count"] == 0, literal
    too_long = client.get(url, {"q": "a" * 201})
    assert too_long.status_code == 400 and too_long.json()["errors"][0]["field"] == "q"
    assert client_of(other_user).get(url).status_code == 404


def test_pages_render_for_the_team_only(make_run, user, other_user, client_of) -> None:
    run = make_run(user=user, name="grpo-lr-sweep", tags=["sweep"], config={"a": 1, "b": {"c": 2}, "same": 0})
    sibling = make_run(user=user, name="grpo-baseline", config={"a": 1, "b": {"c": 3}, "same": 0}, overrides=["a=5"])
    foreign = make_run("beta", user=other_user, name="secret-exp")
    ingest_events([event("metrics", run.pk, 1, 1, {"values": {"reward/mean": 1.0}})], publish=False)
    client = client_of(user)
    page = client.get(reverse("tracking:run_detail", args=[run.pk]))
    assert page.status_code == 200 and b"vendor/plotly.min.js" in page.content
    assert client.get(reverse("tracking:rollouts", args=[run.pk])).status_code == 200
    assert client.get(reverse("tracking:run_detail", args=[foreign.pk])).status_code == 404
    history = client.get(reverse("tracking:history")).content.decode()
    assert "grpo-lr-sweep" in history and "grpo-baseline" in history and "secret-exp" not in history
    tagged = client.get(reverse("tracking:history"), {"tag": "sweep"}).content.decode()
    assert "grpo-lr-sweep" in tagged and "grpo-baseline" not in tagged
    searched = client.get(reverse("tracking:history"), {"q": "baseline"}).content.decode()
    assert "grpo-baseline" in searched and "grpo-lr-sweep" not in searched
    by_id = client.get(reverse("tracking:history"), {"q": str(foreign.pk)}).content.decode()
    assert "secret-exp" not in by_id  # a run id of another team finds nothing
    compare = client.get(reverse("tracking:compare"), {"runs": f"{run.pk},{sibling.pk},{foreign.pk}"})
    diff = dict(compare.context["diff"])
    assert diff == {"a": [1, 5], "b.c": [2, 3]}  # only differing keys, run overrides applied
    assert compare.context["missing"] == [foreign.pk]


def test_plotly_is_served_locally(client_of, user) -> None:
    from django.contrib.staticfiles import finders

    path = finders.find("vendor/plotly.min.js")
    assert path and path.endswith("plotly.min.js")
    with open(path, encoding="utf-8") as bundle:
        assert "plotly" in bundle.read(2000).lower()


def test_plotly_goes_out_gzipped_to_a_browser_that_accepts_it(client) -> None:
    """The 4.8 MB bundle is the first page's heaviest download: WhiteNoise sends its gzip copy (under a third of
    the size) with Vary, and the plain file to a client that does not accept gzip."""
    import gzip

    from policylab.tracking.finders import plotly_bundle

    plain = client.get("/static/vendor/plotly.min.js")
    packed = client.get("/static/vendor/plotly.min.js", HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert plain.status_code == packed.status_code == 200
    assert "Content-Encoding" not in plain.headers
    assert packed.headers["Content-Encoding"] == "gzip" and "Accept-Encoding" in packed.headers["Vary"]
    body = b"".join(packed.streaming_content)
    original = plotly_bundle().read_bytes()
    assert len(body) < len(original) / 3
    assert gzip.decompress(body) == original
