"""The trainer's `profile` events (profiler_timeline / profiler_memory, decision 0037): stored once per file (a
replay, or an older event after a newer one, changes nothing), listed on the run page with a download link and
how to open the file, and served only to the run's team, only from the run's own directory."""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from policylab.tracking.ingest import ingest_events, live_event
from policylab.tracking.models import RunProfile
from tests.platform.tracking.conftest import event

pytestmark = pytest.mark.django_db
TRACE = b'{"traceEvents": [{"name": "ppo_update", "ph": "X", "ts": 1, "dur": 2}]}'


def profile(path: Path | str, *, role: str = "actor_train", call: str = "train_step", size: int = 0,
            kind: str = "timeline", fmt: str = "chrome_trace_gz") -> dict[str, Any]:
    return {"path": str(path), "size_bytes": size, "role": role, "rank": 0, "call": call, "kind": kind, "format": fmt}


def write_trace(run_dir: Path, name: str = "actor_train_rank0_train_step.pt.trace.json.gz") -> Path:
    path = run_dir / "profiles" / "step_2" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(TRACE))
    return path


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def download(user, run_id: int, profile_id: int):
    return client_of(user).get(reverse("tracking:profile_download", args=[run_id, profile_id]))


def test_a_profile_event_is_stored_once_per_file_and_an_older_replay_changes_nothing(make_run, runs_dir) -> None:
    run = make_run()
    path = run.run_dir / "profiles" / "step_2" / "critic_rank0_compute_values.pt.trace.json.gz"
    first = event("profile", run.pk, 5, 2, profile(path, role="critic", call="compute_values", size=10))
    ingest_events([first], publish=False)
    ingest_events([first], publish=False)  # a replay
    [row] = RunProfile.objects.filter(run=run)
    assert (row.step, row.role, row.rank, row.call, row.kind, row.format, row.size_bytes, row.seq) == (
        2, "critic", 0, "compute_values", "timeline", "chrome_trace_gz", 10, 5)
    # a resumed attempt profiles step 2 again: the same file, rewritten
    ingest_events([event("profile", run.pk, 40, 2, profile(path, role="critic", call="compute_values", size=12),
                         attempt=2)], publish=False)
    ingest_events([first], publish=False)  # the older event replayed after the newer one
    [row] = RunProfile.objects.filter(run=run)
    assert (row.size_bytes, row.attempt, row.seq) == (12, 2, 40)


def test_odd_values_in_an_event_are_stored_harmlessly(make_run, runs_dir) -> None:
    run = make_run()
    data = {**profile("x\x00y"), "rank": "zero", "size_bytes": -5, "role": "r" * 100}
    ingest_events([event("profile", run.pk, 1, 2, data)], publish=False)
    [row] = RunProfile.objects.filter(run=run)
    assert (row.path, row.rank, row.size_bytes, len(row.role)) == ("x\ufffdy", 0, 0, 32)


def test_the_live_event_names_no_path(make_run, runs_dir) -> None:
    run = make_run()
    live = live_event(event("profile", run.pk, 3, 2, profile(run.run_dir / "profiles" / "a.json.gz")), run.run_dir)
    assert live["data"] == {"role": "actor_train", "kind": "timeline"}


def test_the_run_page_lists_the_files_with_a_link_and_how_to_open_them(make_run, user, runs_dir) -> None:
    run = make_run(user=user)
    page = client_of(user).get(reverse("tracking:run_detail", args=[run.pk])).content.decode()
    assert 'id="run-profiles" aria-label="profiler traces" hidden' in page  # none yet: hidden, ready for a refresh
    trace = write_trace(run.run_dir)
    ingest_events([event("profile", run.pk, 4, 2, profile(trace, size=trace.stat().st_size))], publish=False)
    page = client_of(user).get(reverse("tracking:run_detail", args=[run.pk])).content.decode()
    section = page[page.index('id="run-profiles"'):page.index("</section>", page.index('id="run-profiles"'))]
    [row] = RunProfile.objects.filter(run=run)
    link = reverse("tracking:profile_download", args=[run.pk, row.pk])
    assert f'href="{link}"' in section and "actor_train_rank0_train_step.pt.trace.json.gz" in section
    assert "ui.perfetto.dev" in section and "chrome://tracing" in section and " hidden" not in section[:80]
    assert 'title="profiles/step_2/actor_train_rank0_train_step.pt.trace.json.gz"' in section  # relative to the run
    assert str(runs_dir) not in page
    assert "<script" not in section and "src=" not in section  # nothing loaded from elsewhere (CSP)
    [listed] = client_of(user).get(reverse("api:run-detail", args=[run.pk])).json()["profiles"]
    assert (listed["step"], listed["role"], listed["call"], listed["download_url"]) == (2, "actor_train", "train_step", link)
    assert listed["path"] == "profiles/step_2/actor_train_rank0_train_step.pt.trace.json.gz"


def test_the_download_is_the_file_for_the_team_and_a_404_for_another(make_run, user, other_user, runs_dir) -> None:
    run = make_run(user=user)
    make_run("beta", user=other_user)
    trace = write_trace(run.run_dir)
    ingest_events([event("profile", run.pk, 4, 2, profile(trace))], publish=False)
    [row] = RunProfile.objects.filter(run=run)
    response = download(user, run.pk, row.pk)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == trace.read_bytes()
    assert response["Content-Type"] == "application/gzip"  # no Content-Encoding: the browser keeps the .gz as is
    assert "Content-Encoding" not in response
    assert response["Content-Disposition"] == 'attachment; filename="actor_train_rank0_train_step.pt.trace.json.gz"'
    assert download(other_user, run.pk, row.pk).status_code == 404  # another team's run does not exist
    assert Client().get(reverse("tracking:profile_download", args=[run.pk, row.pk])).status_code == 302  # log in
    assert client_of(user).post(reverse("tracking:profile_download", args=[run.pk, row.pk])).status_code == 405


def test_a_profile_is_only_served_through_its_own_run(make_run, user, runs_dir) -> None:
    mine, other = make_run(user=user), make_run(user=user, name="other")
    trace = write_trace(other.run_dir)
    ingest_events([event("profile", other.pk, 4, 2, profile(trace))], publish=False)
    [row] = RunProfile.objects.filter(run=other)
    assert download(user, other.pk, row.pk).status_code == 200
    assert download(user, mine.pk, row.pk).status_code == 404  # the row is not this run's


@pytest.mark.parametrize("where", ["another run", "outside", "dot-dot", "symlink out", "directory", "missing",
                                   "run dir itself"])
def test_a_path_outside_the_run_directory_is_never_served(make_run, user, runs_dir, tmp_path, where) -> None:
    run, neighbour = make_run(user=user), make_run(user=user, name="neighbour")
    secret = tmp_path / "secret.json.gz"
    secret.write_bytes(b"not yours")
    inside = run.run_dir / "profiles" / "step_2"
    inside.mkdir(parents=True)
    paths = {
        "another run": write_trace(neighbour.run_dir),
        "outside": secret,
        "dot-dot": f"{inside}{'/..' * 40}{secret}",
        "symlink out": inside / "link.json.gz",
        "directory": inside,
        "missing": inside / "gone.json.gz",
        "run dir itself": run.run_dir,
    }
    os.symlink(secret, inside / "link.json.gz")
    ingest_events([event("profile", run.pk, 4, 2, profile(paths[where]))], publish=False)
    [row] = RunProfile.objects.filter(run=run)
    assert download(user, run.pk, row.pk).status_code == 404


def test_a_relative_path_is_taken_from_the_run_directory(make_run, user, runs_dir) -> None:
    run = make_run(user=user)
    write_trace(run.run_dir)
    ingest_events([event("profile", run.pk, 4, 2, profile("profiles/step_2/actor_train_rank0_train_step.pt.trace.json.gz"))],
                  publish=False)
    [row] = RunProfile.objects.filter(run=run)
    assert download(user, run.pk, row.pk).status_code == 200
