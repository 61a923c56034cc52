"""Fingerprint and resume events: stored per attempt (idempotently), shown on the run page and in the API's
run detail, and the differences of two runs' environment and data listed on compare."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from policylab.tracking.compare import environment_diff
from policylab.tracking.ingest import ingest_events
from policylab.tracking.models import AttemptRecord
from tests.platform.tracking.conftest import event

pytestmark = pytest.mark.django_db

SHA_A, SHA_B = "a" * 64, "b" * 64


def fingerprint(torch: str = "2.5.1", data_sha: str = SHA_A, gpus: int | None = None) -> dict[str, Any]:
    hardware: dict[str, Any] = {"cpu_model": "AMD EPYC", "cpu_count": 2}
    if gpus is not None:
        hardware |= {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": gpus, "gpu_driver": "550.54.15"}
    return {"packages": {"torch": torch, "transformers": "4.57.0", "ray": "2.60.0"},
            "policylab": {"commit": "c" * 40, "dirty": False}, "hardware": hardware, "config_hash": "d" * 64,
            "data": {"train": {"files": {"gsm8k.jsonl": {"sha256": data_sha, "bytes": 2048}}}}}


def resume_report(run_dir: str, problems: list[str] | None = None) -> dict[str, Any]:
    return {"ok": not problems, "problems": problems or [], "asked": "latest", "checkpoint": f"{run_dir}/checkpoints/step_2",
            "step": 2, "data": {"epoch": 0, "index": 8, "position": 8, "next_batch": 3, "ledger_position": 8},
            "ledger": {"file": f"{run_dir}/ledger.jsonl", "prompts_drawn": 8, "prompts_trained": 8,
                       "prompts_in_flight": 0, "prompts_filtered": 0, "samples_dropped_stale": 0,
                       "batches_dropped_stale": 0, "lost": 0, "duplicated": 0},
            "rng": {"driver": True, "actor_train": [0]},
            "optimizer": {"actor_train": {"optimizer_step": 8, "scheduler_step": 8}},
            "kl": {"type": "FixedKLController", "value": 0.001}, "reward_norm": {}, "notes": []}


@pytest.fixture
def client_of():
    def login(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return login


def test_ingest_stores_one_record_per_attempt_and_replays_change_nothing(make_run, runs_dir) -> None:
    run = make_run()
    events = [event("fingerprint", run.pk, 1, 0, fingerprint()),
              event("fingerprint", run.pk, 10, 0, fingerprint(torch="2.6.0"), attempt=2),
              event("resume", run.pk, 11, 2, resume_report(str(run.run_dir)), attempt=2)]
    ingest_events(events, publish=False)
    ingest_events(events, publish=False)  # a replay
    ingest_events([event("fingerprint", run.pk, 9, 0, fingerprint(torch="older"), attempt=2)], publish=False)
    records = {r.attempt: r for r in AttemptRecord.objects.filter(run=run)}
    assert sorted(records) == [1, 2]
    assert records[1].fingerprint["packages"]["torch"] == "2.5.1" and records[1].resume is None
    assert records[2].fingerprint["packages"]["torch"] == "2.6.0"  # seq 9 < 10: the older event lost
    assert records[2].resume["optimizer"]["actor_train"]["optimizer_step"] == 8 and records[2].resume_seq == 11


def test_the_run_page_and_the_api_show_the_resume_report_and_the_fingerprint(make_run, user, other_user, client_of,
                                                                            runs_dir) -> None:
    run = make_run(user=user)
    make_run("beta", user=other_user)
    problem = "data position skipped ahead: the checkpoint's sampler is at stream position 10 (epoch 0, index 10)"
    ingest_events([event("fingerprint", run.pk, 1, 0, fingerprint(gpus=8)),
                   event("resume", run.pk, 2, 2, resume_report(str(run.run_dir), [problem]))], publish=False)
    page = client_of(user).get(reverse("tracking:run_detail", args=[run.pk])).content.decode()
    assert 'id="attempt-records"' in page and "DOES NOT ADD UP" in page
    assert "data position skipped ahead" in page and "optimizer step <strong>8</strong>" in page
    assert "torch <code>2.5.1</code>" in page and "gpu_count <strong>8</strong>" in page
    assert "<code>checkpoints/step_2</code>" in page and str(runs_dir) not in page  # server paths hidden
    detail = client_of(user).get(reverse("api:run-detail", args=[run.pk])).json()
    [record] = detail["attempt_records"]
    assert record["attempt"] == 1 and record["resume"]["problems"] == [problem]
    assert record["resume"]["ledger"]["file"] == "ledger.jsonl" and record["fingerprint"]["hardware"]["gpu_count"] == 8
    assert client_of(other_user).get(reverse("api:run-detail", args=[run.pk])).status_code == 404


def test_compare_lists_what_differs_in_environment_and_data(make_run, user, client_of, runs_dir) -> None:
    one, two = make_run(user=user), make_run(user=user)
    ingest_events([event("fingerprint", one.pk, 1, 0, fingerprint())], publish=False)
    ingest_events([event("fingerprint", two.pk, 1, 0, fingerprint(torch="2.6.0", data_sha=SHA_B)),
                   event("fingerprint", two.pk, 5, 0, fingerprint(torch="2.7.0", data_sha=SHA_B), attempt=2)],
                  publish=False)
    page = client_of(user).get(reverse("tracking:compare"), {"runs": f"{one.pk},{two.pk}"}).content.decode()
    table = page[page.index('id="environment-diff"'):]
    table = table[: table.index("</table>")]
    assert "packages.torch" in table and "2.5.1" in table and "2.7.0" in table  # the newest attempt's
    assert "data.train.files.gsm8k.jsonl.sha256" in table and f"{SHA_B[:12]}…" in table
    assert "packages.ray" not in table and "config_hash" not in table  # the same in both


def test_environment_diff_of_a_run_without_fingerprint_marks_it_missing() -> None:
    rows = dict(environment_diff([fingerprint(), None]))
    assert rows["packages.torch"] == ["2.5.1", "—"] and rows["config_hash"] == [f"{'d' * 12}…", "—"]
    assert environment_diff([fingerprint(), fingerprint()]) == []


def test_a_config_hash_alone_is_not_shown_as_the_only_difference_and_empty_data_reads_as_such() -> None:
    """Issue 46 item 7: compare showed a config-hash difference as the only change between two demo runs (the
    config table says what differs in the configs), and `data {}` for an agentic run."""
    other_hash = fingerprint() | {"config_hash": "e" * 64}
    assert environment_diff([fingerprint(), other_hash]) == []
    rows = dict(environment_diff([fingerprint(), other_hash | {"packages": {"torch": "2.6.0", "transformers": "4.57.0",
                                                                             "ray": "2.60.0"}}]))
    assert rows["config_hash"] == [f"{'d' * 12}…", f"{'e' * 12}…"]  # beside another difference it stays
    agentic = fingerprint() | {"data": {}}
    assert dict(environment_diff([fingerprint(), agentic]))["data"] == ["—", "none recorded"]  # was "{}"
