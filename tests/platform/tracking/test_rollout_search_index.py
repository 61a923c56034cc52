"""Rollout search from an index (issue 41, decision 0048): SQLite's FTS5 trigram table and PostgreSQL's pg_trgm
indexes answer `?q=`, with the answers of the linear scan they replaced (every sample whose prompt or response
holds the text, ignoring ASCII case), and the index follows inserts, ingest's upserts and deletes."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from policylab.tracking import selectors
from policylab.tracking.models import RolloutSample
from policylab.tracking.selectors import ROLLOUT_FTS, RolloutFilters, rollout_text_filter, rollouts_matching

pytestmark = pytest.mark.django_db

TEXTS = [  # (prompt, response)
    ("What is 2 + 2?", "The answer is 4."),
    ("what is 3 + 5?", "the ANSWER is 8"),
    ("Spell 'cat' backwards", "tac"),
    ("100% sure? use a_b", "yes: 100% and a_b"),
    ('He said "hi"', "quote: \"hi\" 'there'"),
    ("Ünïcödé prompt", "naïve café"),
    ("needle in the haystack", "found the needle-31337 here"),
    ("plain", "nothing to see"),
    ("aaaa ab", "abab abba baaab"),  # repeated trigrams: a phrase must still be a contiguous substring
    ("line\nbreak\ttab", "x  y"),
]
QUERIES = ["answer is", "ANSWER", "is 4", "tac", "100%", "a_b", "%", "_", '"hi"', "'there'", "naïve café", "Ünïcödé",
           "NAÏVE CAFÉ", "ünïcödé", "needle-31337", "needle", "the", "zz", "ca", "no such text anywhere", "? ",
           "aaaa", "aaaaa", "abab", "baba", "abba", "aab", "baaa", "k\nb", "x  y", "x y", "*", "NEAR", "a OR b"]


def reference(q: str) -> set[int]:
    """Indexes of TEXTS holding `q`, ignoring case (Python's own lower(); the texts have no letter whose case
    mapping differs between Python, SQLite's FTS5 folding and PostgreSQL's UPPER)."""
    return {i for i, (prompt, response) in enumerate(TEXTS) if q.lower() in prompt.lower() or q.lower() in response.lower()}


@pytest.fixture
def run(make_run, user):
    run = make_run(user=user)
    RolloutSample.objects.bulk_create(
        RolloutSample(run=run, step=1, group_id=0, sample_index=i, prompt=prompt, response=response, seq=1, time=0.0)
        for i, (prompt, response) in enumerate(TEXTS))
    other = make_run(user=user)  # another run's samples never answer
    RolloutSample.objects.bulk_create(
        RolloutSample(run=other, step=1, group_id=0, sample_index=i, prompt=prompt, response=response, seq=1,
                      time=0.0) for i, (prompt, response) in enumerate(TEXTS))
    return run


@pytest.mark.parametrize("q", QUERIES)
def test_the_index_answers_what_the_scan_answered(run, q):
    found = {s.sample_index for s in rollouts_matching(run, RolloutFilters(q=q))}
    assert found == reference(q), q


def test_the_api_search_goes_through_the_index(run, user):
    client = Client()
    client.force_login(user)
    answer = client.get(reverse("tracking:api-rollouts", args=[run.pk]), {"q": "NEEDLE-31337"}).json()
    assert [r["sample_index"] for r in answer["results"]] == [6]


def test_the_index_exists_and_the_query_uses_it(run):
    query = rollouts_matching(run, RolloutFilters(q="needle-31337"))
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = " ".join(str(row) for row in cursor.fetchall())
            assert ROLLOUT_FTS in plan, plan
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s",
                           [RolloutSample._meta.db_table])
            triggers = {row[0] for row in cursor.fetchall()}
            # a migration that rebuilds the table (SQLite's ALTER) drops these: make them again there
            assert triggers == {f"{ROLLOUT_FTS}_{event}" for event in ("insert", "delete", "update")}
        else:  # the search's own filter (the run's btree index would win on a table this small)
            sql, params = RolloutSample.objects.filter(rollout_text_filter("needle-31337")).query.sql_with_params()
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = " ".join(row[0] for row in cursor.fetchall())
            assert "rollout_prompt_trgm" in plan and "rollout_response_trgm" in plan, plan


def test_upserts_and_deletes_keep_the_index_in_step(run):
    """ingest replaces a replayed sample's text (bulk_create with update_conflicts) and a deleted run takes its
    samples along: the index must follow both."""
    RolloutSample.objects.bulk_create(
        [RolloutSample(run=run, step=1, group_id=0, sample_index=7, prompt="plain", response="now a walrus", seq=2,
                       time=0.0)],
        update_conflicts=True, unique_fields=["run", "step", "group_id", "sample_index"],
        update_fields=["prompt", "response", "seq"])
    assert [s.sample_index for s in rollouts_matching(run, RolloutFilters(q="walrus"))] == [7]
    assert not rollouts_matching(run, RolloutFilters(q="nothing to see")).exists()
    RolloutSample.objects.filter(run=run, sample_index=6).delete()
    assert not rollouts_matching(run, RolloutFilters(q="needle")).exists()
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:  # FTS5's own consistency check of an external-content index
            cursor.execute(f"INSERT INTO {ROLLOUT_FTS}({ROLLOUT_FTS}) VALUES ('integrity-check')")


def test_short_text_is_still_found_by_the_scan(run, monkeypatch):
    """Under three characters no trigram exists: the search scans (bounded by its time budget), as before."""
    assert selectors.MIN_INDEXED_CHARS == 3
    assert {s.sample_index for s in rollouts_matching(run, RolloutFilters(q="ca"))} == reference("ca") != set()
