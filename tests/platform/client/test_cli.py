"""The `policylab` command (client/, installed by scripts/setup.sh) against live servers: the real web
stack with a Celery worker, a Ray head and the trainer for submit -> follow -> succeeded and for cancel;
pytest-django's live server for the errors. Exit codes are asserted as a shell script would use them."""

from __future__ import annotations

import csv
import io
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.services import free_port
from tests.platform.web_stack import CELERY_CHANNELS_PREFIX, TrackingStack, start_tracking_stack
from tests.services import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
REPO_ROOT = Path(__file__).resolve().parents[3]
POLICYLAB = Path(sys.executable).with_name("policylab")
DEMO = str(REPO_ROOT / "examples" / "demo_grpo_cpu.yaml")
OK, FAILED, USAGE, NOT_FOUND, CANCELLED, REFUSED, UNAVAILABLE = range(7)


@dataclass
class Cli:
    """`policylab …` in a subprocess, with a home (and credentials file) of this test's own."""

    home: Path

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
        if not POLICYLAB.exists():
            pytest.fail(f"no {POLICYLAB}: `bash scripts/setup.sh` installs the client (pip install -e client/)")
        env = {k: v for k, v in os.environ.items() if not k.startswith("POLICYLAB_")}
        env |= {"HOME": str(self.home), "POLICYLAB_CONFIG": str(self.home / "policylab.json")}
        return subprocess.run([str(POLICYLAB), *args], input=stdin, capture_output=True, text=True, env=env,
                              timeout=timeout)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "home")


@pytest.fixture
def member(transactional_db):
    """erin, a member of team "cli" with a project, and an API token of hers."""
    from django.contrib.auth import get_user_model

    from policylab.accounts.models import Membership, Role, Team
    from policylab.accounts.services import create_api_token

    user = get_user_model().objects.create_user("erin", password="erin-pass-123456")
    team = Team.objects.create(name="CLI team", slug="cli")
    Membership.objects.create(user=user, team=team, role=Role.MEMBER)
    return create_api_token(user, team, "cli").secret


@pytest.fixture
def stack(live_celery, settings, tmp_path: Path) -> Iterator[TrackingStack]:
    runs_dir = Path(live_celery.env["POLICYLAB_RUNS_DIR"])
    settings.POLICYLAB_RUNS_DIR = runs_dir
    (tmp_path / "stack").mkdir()
    with start_tracking_stack(live_celery.env["REDIS_URL"], runs_dir, tmp_path / "stack", CELERY_CHANNELS_PREFIX) as up:
        yield up


def cancel_leftovers() -> None:
    """Never leave training running on the shared Ray head."""
    from policylab.experiments.models import Run
    from policylab.experiments.services import request_cancel

    for run in Run.objects.filter(status__in=["queued", "submitting", "starting", "running"]):
        request_cancel(run)


def test_submit_follow_to_success_then_inspect(cli, member, stack) -> None:
    login = cli("login", "--url", stack.url, stdin=member + "\n")
    assert login.returncode == OK, login.stderr
    stored = cli.home / "policylab.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600 and member in stored.read_text()

    try:
        submitted = cli("submit", DEMO, "max_steps=3", "save_steps=3", "eval_steps=100", "--name", "cli demo",
                        "--follow")
        assert submitted.returncode == OK, submitted.stderr[-3000:]
        run_id = submitted.stdout.splitlines()[0]
        assert run_id.isdigit(), submitted.stdout[:500]
        assert "step 3/3" in submitted.stdout  # the trainer's log, followed
        progress = submitted.stderr
        assert f"[run {run_id} starting" in progress and f"[run {run_id} succeeded" in progress, progress
    finally:
        cancel_leftovers()

    status = cli("status", run_id)
    assert (status.returncode, status.stdout.strip()) == (OK, f"run {run_id} succeeded · step 3/3")
    metrics = cli("metrics", run_id, "--csv")
    table = list(csv.reader(io.StringIO(metrics.stdout)))
    assert metrics.returncode == OK and table[0][0] == "step" and "reward/mean" in table[0]
    assert [row[0] for row in table[1:]] == ["1", "2", "3"]
    listed = cli("runs", "list")
    assert listed.returncode == OK and any(line.split()[:1] == [run_id] and "succeeded" in line
                                           for line in listed.stdout.splitlines())
    checkpoints = cli("checkpoints", run_id)
    assert checkpoints.returncode == OK and "fork only" in checkpoints.stdout  # the final one: resume refuses it
    assert "already finished all its 3 steps" in checkpoints.stdout and "max_steps=6" in checkpoints.stdout
    resume = cli("resume", run_id)
    assert resume.returncode == REFUSED and "already finished all its 3 steps" in resume.stderr
    logs = cli("logs", run_id)
    assert logs.returncode == OK and "step 3/3" in logs.stdout and "\x1b[" not in logs.stdout


def test_cancel_a_running_run_with_exit_codes(cli, member, stack) -> None:
    from policylab.experiments.models import Run

    token = ["--url", stack.url, "--token", member]
    try:
        submitted = cli(*token, "submit", DEMO, "max_steps=100000", "save_steps=100000", "--project", "long runs")
        assert submitted.returncode == OK, submitted.stderr
        run_id = int(submitted.stdout.strip())
        wait_for(lambda: Run.objects.get(pk=run_id).status in ("starting", "running"), 120, "the run to start")
        cancelled = cli(*token, "cancel", str(run_id), "--wait")
        assert cancelled.returncode == OK, cancelled.stderr
        assert f"run {run_id} cancelling" in cancelled.stderr and f"[run {run_id} cancelled" in cancelled.stderr
    finally:
        cancel_leftovers()
    assert cli(*token, "status", str(run_id)).returncode == CANCELLED
    assert cli(*token, "logs", str(run_id), "--follow").returncode == CANCELLED
    again = cli(*token, "cancel", str(run_id))
    assert again.returncode == OK and "cancelled" in again.stderr  # idempotent
    run = Run.objects.get(pk=run_id)
    assert list(run.attempts.values_list("number", "status")) == [(1, "cancelled")]


def test_errors_have_exit_codes_a_script_can_rely_on(cli, member, live_server, settings, tmp_path: Path) -> None:
    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"
    token = ["--url", live_server.url, "--token", member]
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(DEMO).read_text().replace("rollout_batch_size: 16", "rollout_batch_size: 3"))
    invalid = cli(*token, "submit", str(bad))
    assert invalid.returncode == USAGE and "rollout_batch_size" in invalid.stderr and invalid.stdout == ""
    assert cli(*token, "submit", str(tmp_path / "missing.yaml")).returncode == USAGE
    assert cli(*token, "status").returncode == USAGE  # argparse: the run id is missing
    assert cli(*token, "status", "999999").returncode == NOT_FOUND
    assert cli("--url", live_server.url, "--token", "plk_wrong", "status", "1").returncode == NOT_FOUND
    assert cli("status", "1").returncode == NOT_FOUND  # never logged in
    assert cli("--url", f"http://127.0.0.1:{free_port()}", "--token", member, "runs", "list").returncode == UNAVAILABLE
    refused = cli("login", "--url", live_server.url, "--token", "plk_wrong")
    assert refused.returncode == NOT_FOUND and not (cli.home / "policylab.json").exists()


def test_the_python_client_sends_any_of_the_four_formats_for_the_server_to_translate(member, live_server, settings):
    from policylab_client import ApiError, Client

    settings.POLICYLAB_READ_ROOTS = [*settings.POLICYLAB_READ_ROOTS, str(REPO_ROOT / "data")]  # verl's data/gsm8k
    client = Client(live_server.url, member)
    project = client.project("imports")
    for name, expected in (("verl_grpo_gsm8k.yaml", "verl"), ("skyrl_grpo_gsm8k_colocated.yaml", "skyrl")):
        text = (REPO_ROOT / "examples" / "foreign" / name).read_text()
        experiment = client.create_experiment(project["id"], name, text)
        assert experiment["source_format"] == expected and experiment["config"]["actor_train"]
    with pytest.raises(ApiError) as refused:
        client.create_experiment(project["id"], "rlinf", (REPO_ROOT / "examples" / "foreign" / "rlinf_grpo_megatron.yaml").read_text())
    assert refused.value.status == 400 and any("sglang is not built" in m for m in refused.value.messages)
