"""A real agentic run (examples/agentic_grid_cpu.yaml, one step, the trainer's local backend) through ingest into
the inspector's API and the frames view: the contract the inspector reads is the one the trainer writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from policylab.tracking.ingest import ingest_events, read_jsonl
from policylab.tracking.models import RolloutSample

pytestmark = pytest.mark.django_db
REPO_ROOT = Path(__file__).resolve().parents[3]


def test_a_real_agentic_step_reaches_the_inspector_with_turns_and_frames(make_run, user, runs_dir) -> None:
    run = make_run(user=user)
    out = run.run_dir
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    trained = subprocess.run(
        [sys.executable, "-m", "trainer", "run", "examples/agentic_grid_cpu.yaml", "--workers", "local", "max_steps=1",
         "eval_steps=0", "save_steps=100", "track_with=none", f"output_dir={out}", f"logging_dir={out}/logs",
         f"render_save_dir={out}/render"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    ingest_events(list(read_jsonl(out / "events.jsonl")), run_id=run.pk, publish=False)

    samples = RolloutSample.objects.filter(run=run)
    assert samples.count() == 32  # every trajectory of the step (rollout_batch_size 32), not the old 16
    client = Client()
    client.force_login(user)
    body = client.get(reverse("tracking:api-rollouts", args=[run.pk]), {"env_tag": "FrozenLake", "page_size": 5}).json()
    assert body["count"] == 32 and body["env_tags"] == ["FrozenLake"]
    first = body["results"][0]
    assert first["turns"][0]["role"] == "user" and first["turns"][1]["role"] == "assistant"
    assert len(first["token_mask"]) == len(first["tokens"]) and set(first["token_mask"]) <= {0, 1}
    assert first["num_turns"] == sum(t["role"] == "assistant" for t in first["turns"])
    assert first["stop_reason_text"] != first["stop_reason"]  # a done reason the inspector puts in words
    frames = client.get(first["frames_url"])
    assert frames.status_code == 200 and frames.content.decode().startswith("# reset\n")
