"""Interpreter and virtualenv paths are shown as `<python>` / `<venv>` (issue 41, finding 4): tracebacks in run
logs and stall stacks named `…/site-packages/ray/…` and the Python installation's home to every viewer."""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import pytest
from django.test import Client

from policylab.accounts.services import create_api_token
from policylab.experiments.models import Run, RunStatus
from policylab.tracking.ingest import ingest_events

SITE_PACKAGES = sysconfig.get_paths()["purelib"]  # the venv's when the tests run in one
STDLIB = str(Path(json.__file__).parent.parent)  # the installation's standard library


def event(run: Run, seq: int, kind: str, data: dict) -> dict:
    return {"v": 1, "type": kind, "run_id": str(run.pk), "attempt": 1, "seq": seq, "step": 0,
            "time": 1_763_800_000.0 + seq, "data": data}


@pytest.mark.django_db
def test_logs_and_stall_stacks_show_interpreter_paths_as_placeholders(alice, victor, team_a, make_experiment):
    assert sys.prefix != sys.base_prefix, "the tests run in a virtualenv (scripts/setup.sh makes one)"
    run = Run.objects.create(experiment=make_experiment(alice, team_a), created_by=alice, status=RunStatus.RUNNING)
    ray_frame = f'File "{SITE_PACKAGES}/ray/_private/worker.py", line 2771, in get'
    stdlib_frame = f'File "{STDLIB}/threading.py", line 327, in wait'
    ingest_events([
        event(run, 1, "log", {"level": "error", "lines": [ray_frame, f"interpreter {sys.executable}"]}),
        event(run, 2, "stall", {"phase": "generate", "summary": f"waiting in {STDLIB}/threading.py",
                                "elapsed_s": 700.0, "bound_s": 600.0, "on_stall": "fail", "waiting": [],
                                "stacks": f"Thread main:\n  {ray_frame}\n  {stdlib_frame}", "file": "stalls/1.txt"}),
    ], publish=False)

    viewer = Client(HTTP_AUTHORIZATION=f"Bearer {create_api_token(victor, team_a, 'v').secret}")
    logs = viewer.get(f"/api/runs/{run.pk}/logs/").json()["results"]
    stalls = viewer.get(f"/api/runs/{run.pk}/").json()["stalls"]
    shown = json.dumps([logs, stalls])
    for path in (sys.prefix, sys.base_prefix, SITE_PACKAGES, STDLIB):
        assert path not in shown, path
    texts = [line["text"] for line in logs]
    assert f'File "<venv>/{Path(SITE_PACKAGES).relative_to(sys.prefix)}/ray/_private/worker.py"' in texts[0]
    assert texts[1] == f"interpreter <venv>/{Path(sys.executable).relative_to(sys.prefix)}"
    assert f'"<python>/{Path(STDLIB).relative_to(sys.base_prefix)}/threading.py"' in stalls[0]["stacks"]
    assert stalls[0]["summary"] == f"waiting in <python>/{Path(STDLIB).relative_to(sys.base_prefix)}/threading.py"
