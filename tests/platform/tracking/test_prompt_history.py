"""The rollout inspector's prompt history (issue 33, "Rollout diff across steps and runs"; decision 0035): ingest
keeps each sample's prompt hash and its trainer-engine log-prob mismatch, and the API answers one prompt's
samples step by step in this run and a compared one, scoped to the caller's teams and bounded per page."""

from __future__ import annotations

import hashlib
import importlib

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse

from policylab.accounts.models import Team
from policylab.accounts.services import create_api_token
from policylab.tracking import selectors
from policylab.tracking.ingest import ingest_events
from policylab.tracking.models import RolloutSample
from tests.platform.tracking.conftest import event

pytestmark = pytest.mark.django_db
TRAINER = [-0.1, -0.5, -1.0, -2.0]
ENGINE = [-0.1, -0.7, -0.4, None]  # a NaN the trainer sent as null


def sample(prompt: str, group: int, index: int, reward: float, **extra) -> dict:
    return {"prompt": prompt, "response": f"{prompt} -> {group}.{index}", "reward": reward, "advantage": 0.0,
            "prompt_length": 3, "response_length": 4, "stop_reason": "eos", "group_id": group,
            "sample_index": index, **extra}


def rollouts(run_id, steps: dict[int, list[dict]]) -> list[dict]:
    return [event("rollouts", run_id, seq, step, {"samples": samples})
            for seq, (step, samples) in enumerate(sorted(steps.items()), start=1)]


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def test_ingest_keeps_the_prompt_hash_and_the_mismatch_and_a_replay_changes_nothing(make_run, user) -> None:
    run = make_run(user=user)
    tokens = {"tokens": ["a", "b", "c", "d"], "token_logprobs": ENGINE, "token_logprobs_trainer": TRAINER}
    events = rollouts(run.pk, {1: [sample("add 2 3", 0, 0, 1.0, **tokens),
                                   sample("add 2 3", 0, 1, 0.0, **tokens, token_mask=[1, 1, 0, 1]),
                                   sample("old event", 1, 0, 0.5, tokens=["x"], token_logprobs=[-0.3])]})
    ingest_events(events, publish=False)
    ingest_events(events, publish=False)  # a replay
    rows = list(RolloutSample.objects.filter(run=run).order_by("group_id", "sample_index"))
    assert len(rows) == 3
    assert [r.prompt_hash for r in rows] == [sha("add 2 3"), sha("add 2 3"), sha("old event")]
    # |trainer - engine| per token: 0, 0.2, 0.6 and none for the NaN; the mask leaves the third out
    assert rows[0].logprob_mismatch_mean == pytest.approx(0.8 / 3) and rows[0].logprob_mismatch_max == pytest.approx(0.6)
    assert rows[1].logprob_mismatch_mean == pytest.approx(0.1) and rows[1].logprob_mismatch_max == pytest.approx(0.2)
    assert rows[0].token_logprobs_trainer == TRAINER
    assert rows[2].token_logprobs_trainer is None and rows[2].logprob_mismatch_max is None  # an older trainer's


def test_the_migration_backfills_the_prompt_hash_of_samples_stored_before_it(make_run, user) -> None:
    run = make_run(user=user)
    RolloutSample.objects.bulk_create(RolloutSample(run=run, step=s, group_id=0, sample_index=0, prompt=f"p{s % 3}",
                                                    response="r", seq=s, time=0.0) for s in range(1, 8))
    assert set(RolloutSample.objects.values_list("prompt_hash", flat=True)) == {""}
    migration = importlib.import_module("policylab.tracking.migrations.0007_rollout_prompt_history")
    migration.backfill(apps, None)
    assert {(p, h) for p, h in RolloutSample.objects.values_list("prompt", "prompt_hash")} == {
        (f"p{k}", sha(f"p{k}")) for k in range(3)}


@pytest.fixture
def two_runs(make_run, user):
    """This run logs "add 2 3" at steps 1-3 (twice at step 2, in two groups) and "add 1 1" at step 4; the
    compared run logs "add 2 3" at steps 2 and 5."""
    run, other = make_run(user=user, name="baseline"), make_run(user=user, name="lower lr")
    ingest_events(rollouts(run.pk, {
        1: [sample("add 2 3", 0, 0, 1.0), sample("add 2 3", 0, 1, 0.0), sample("add 9 9", 1, 0, 0.0)],
        2: [sample("add 2 3", 0, 0, 1.0), sample("add 2 3", 3, 0, 1.0)],
        3: [sample("add 2 3", 0, 0, 0.0, tokens=["5"], token_logprobs=[-0.2], token_logprobs_trainer=[-0.25])],
        4: [sample("add 1 1", 0, 0, 1.0)],
    }), publish=False)
    ingest_events(rollouts(other.pk, {2: [sample("add 2 3", 5, 0, 0.0)], 5: [sample("add 2 3", 2, 1, 1.0)]}),
                  publish=False)
    return run, other


def test_a_prompts_history_side_by_side_with_a_compared_run(two_runs, user) -> None:
    run, other = two_runs
    url = reverse("tracking:api-prompt-history", args=[run.pk])
    body = client_of(user).get(url, {"prompt": sha("add 2 3"), "compare": other.pk}).json()
    assert body["prompt"] == "add 2 3" and body["prompt_hash"] == sha("add 2 3")
    assert [(r["id"], r["name"], r["steps"], r["samples"]) for r in body["runs"]] == [
        (run.pk, "baseline", 3, 5), (other.pk, "lower lr", 2, 2)]
    assert body["count"] == 4  # steps 1, 2, 3, 5
    grid = {row["step"]: [[(s["group_id"], s["sample_index"], s["reward"]) for s in c["samples"]] for c in row["cells"]]
            for row in body["results"]}
    assert grid == {1: [[(0, 0, 1.0), (0, 1, 0.0)], []], 2: [[(0, 0, 1.0), (3, 0, 1.0)], [(5, 0, 0.0)]],
                    3: [[(0, 0, 0.0)], []], 5: [[], [(2, 1, 1.0)]]}
    cell = body["results"][2]["cells"][0]["samples"][0]
    assert cell["logprob_mismatch_max"] == pytest.approx(0.05) and "prompt" not in cell and "tokens" not in cell
    # by its exact text the same; without compare, this run alone
    alone = client_of(user).get(url, {"prompt": "add 2 3"}).json()
    assert [r["id"] for r in alone["runs"]] == [run.pk] and [row["step"] for row in alone["results"]] == [1, 2, 3]
    # one sample with its tokens and the mismatch of each
    tokens = client_of(user).get(cell["url"]).json()
    assert tokens["tokens"] == ["5"] and tokens["token_logprobs_trainer"] == [-0.25]
    assert tokens["token_logprob_mismatch"] == [pytest.approx(0.05)]


def test_the_history_is_a_404_for_other_teams_and_unknown_prompts_and_names_bad_parameters(
        two_runs, make_run, user, other_user) -> None:
    run, other = two_runs
    foreign = make_run("beta", user=other_user)
    ingest_events(rollouts(foreign.pk, {1: [sample("add 2 3", 0, 0, 1.0)]}), publish=False)
    url = reverse("tracking:api-prompt-history", args=[run.pk])
    mine = client_of(user)
    assert mine.get(url, {"prompt": "add 2 3", "compare": foreign.pk}).status_code == 404  # not "forbidden"
    assert client_of(other_user).get(url, {"prompt": "add 2 3"}).status_code == 404
    token = create_api_token(other_user, Team.objects.get(slug="beta"), "ci").secret
    assert Client().get(url, {"prompt": "add 2 3"}, HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 404
    theirs = reverse("tracking:api-prompt-history", args=[foreign.pk])
    assert mine.get(theirs, {"prompt": "add 2 3"}).status_code == 404
    assert mine.get(url, {"prompt": "never asked"}).status_code == 404
    foreign_sample = RolloutSample.objects.get(run=foreign)
    assert mine.get(reverse("tracking:api-rollout-sample", args=[foreign_sample.pk])).status_code == 404
    missing = mine.get(url)
    assert missing.status_code == 400 and missing.json()["errors"][0]["field"] == "prompt"
    typo = mine.get(url, {"prompt": "add 2 3", "compare_with": other.pk})
    assert typo.status_code == 400 and "compare_with" in typo.json()["errors"][0]["message"]


def test_a_long_history_is_paged_in_a_fixed_number_of_queries(make_run, user, django_assert_max_num_queries) -> None:
    """300 steps x 2 runs x 20 samples of one prompt: a page holds page_size steps and at most
    HISTORY_CELL_SAMPLES samples per cell, whatever the run's size, in the same few queries."""
    run, other = make_run(user=user), make_run(user=user)
    for target in (run, other):
        RolloutSample.objects.bulk_create(
            RolloutSample(run=target, step=step, group_id=i // 10, sample_index=i % 10, prompt="the prompt",
                          prompt_hash=sha("the prompt"), response=f"{step}.{i}", reward=float(i), seq=step, time=0.0)
            for step in range(1, 301) for i in range(20))
    url = reverse("tracking:api-prompt-history", args=[run.pk])
    client = client_of(user)
    with django_assert_max_num_queries(12):
        body = client.get(url, {"prompt": sha("the prompt"), "compare": other.pk, "page": 3, "page_size": 10}).json()
    assert body["count"] == 300 and [row["step"] for row in body["results"]] == list(range(21, 31))
    for row in body["results"]:
        for cell in row["cells"]:
            assert cell["count"] == 20 and len(cell["samples"]) == selectors.HISTORY_CELL_SAMPLES
            assert [(s["group_id"], s["sample_index"]) for s in cell["samples"]][:11] == [
                *((0, k) for k in range(10)), (1, 0)]
    assert len(client.get(url, {"prompt": sha("the prompt"), "page_size": 500}).json()["results"]) == 50  # the cap
