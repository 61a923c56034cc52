"""What the run page, the inspector, history and compare read: agentic trajectories stored and trimmed live,
server-side filters and sorts, metric summaries that follow resumes, frames served only from the run's own
directory, pins, and the async panel's keys against the trainer's."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from policylab.experiments.models import RunStatus
from policylab.tracking import selectors
from policylab.tracking.ingest import ingest_events, live_event
from policylab.tracking.models import MetricSummary, RolloutSample
from policylab.tracking.panels import ASYNC_CHARTS
from tests.platform.tracking.conftest import event

pytestmark = pytest.mark.django_db
REPO_ROOT = Path(__file__).resolve().parents[3]


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def trajectory(i: int, *, tag: str, success: bool, turns: int, reward: float, render_path: str = "") -> dict:
    """An agentic sample as trainer/pipeline/agentic.py emits it (docs/decisions/0015)."""
    conversation = [{"role": "user", "text": "grid: P..G", "tokens": 5, "loss": False}]
    for k in range(turns):
        conversation += [
            {"role": "assistant", "text": f"<answer>right</answer> {k}", "tokens": 4, "loss": True, "reward": 0.5,
             "penalty": 0.0 if k else -0.1, "format_ok": k > 0, "action": "right" if k else None, "stop_reason": "eos"},
            {"role": "user", "text": f"grid after {k}", "tokens": 3 if k < turns - 1 else 0, "loss": False},
        ]
    sample = {
        "prompt": "grid: P..G", "response": "…", "reward": reward, "advantage": reward - 0.5, "prompt_length": 5,
        "response_length": 7 * turns, "stop_reason": "success" if success else "max_steps", "group_id": i // 2,
        "sample_index": i % 2, "tokens": ["a", "b", "c"], "token_logprobs": [-0.1, -0.2, -0.3],
        "token_advantages": [0.1, 0.0, 0.1], "token_mask": [1, 0, 1], "env_tag": tag, "success": success,
        "num_turns": turns, "done_reason": "success" if success else "max_steps", "turns": conversation,
    }
    if render_path:
        sample["render_path"] = render_path
    return sample


@pytest.fixture
def agentic_run(make_run, user, runs_dir):
    run = make_run(user=user)
    frames = run.run_dir / "render" / "step_3" / "0_0_FrozenLake.txt"
    frames.parent.mkdir(parents=True)
    frames.write_text("# reset\nP..G\n\n# after reply 1\n.P.G\n")
    samples = [trajectory(0, tag="FrozenLake", success=True, turns=2, reward=1.0, render_path=str(frames)),
               trajectory(1, tag="FrozenLake", success=False, turns=5, reward=-0.2),
               trajectory(2, tag="Sokoban", success=False, turns=3, reward=0.1),
               trajectory(3, tag="Sokoban", success=True, turns=1, reward=0.9)]
    ingest_events([event("rollouts", run.pk, 1, 3, {"samples": samples}),
                   event("rollouts", run.pk, 2, 4, {"samples": samples[:2]})], publish=False)
    return run


def test_trajectories_are_stored_whole_and_trimmed_in_live_frames(agentic_run) -> None:
    stored = RolloutSample.objects.get(run=agentic_run, step=3, group_id=0, sample_index=0)
    assert (stored.env_tag, stored.success, stored.num_turns, stored.done_reason) == ("FrozenLake", True, 2, "success")
    assert stored.token_mask == [1, 0, 1] and len(stored.turns) == 5
    assert stored.turns[1] == {"role": "assistant", "text": "<answer>right</answer> 0", "tokens": 4, "loss": True,
                               "reward": 0.5, "penalty": -0.1, "format_ok": False, "action": None, "stop_reason": "eos"}
    live = live_event(event("rollouts", agentic_run.pk, 9, 3, {"samples": [trajectory(0, tag="FrozenLake", success=True,
                                                                                       turns=2, reward=1.0)]}))
    (sample,) = live["data"]["samples"]
    assert not {"turns", "token_mask", "tokens", "token_logprobs", "token_advantages"} & set(sample)
    assert (sample["env_tag"], sample["num_turns"], sample["success"]) == ("FrozenLake", 2, True)
    assert sample["stop_reason_text"] == "episode solved"


def test_inspector_api_filters_and_sorts_on_the_server(agentic_run, user) -> None:
    client = login(user)
    url = reverse("tracking:api-rollouts", args=[agentic_run.pk])

    def ids(**params) -> list[tuple[int, int, int]]:
        body = client.get(url, params).json()
        return [(s["step"], s["group_id"], s["sample_index"]) for s in body["results"]]

    assert ids(env_tag="Sokoban", step_min=3, step_max=3) == [(3, 1, 0), (3, 1, 1)]
    assert ids(success="true", step_max=3) == [(3, 0, 0), (3, 1, 1)]
    assert ids(turns_min=3, step_max=3) == [(3, 0, 1), (3, 1, 0)]
    assert ids(sort="-reward", step_max=3) == [(3, 0, 0), (3, 1, 1), (3, 1, 0), (3, 0, 1)]
    assert ids(sort="reward", step_max=3)[0] == (3, 0, 1)
    assert ids(sort="-turns", step_max=3)[0] == (3, 0, 1)
    assert ids(latest="true") == [(4, 0, 0), (4, 0, 1)]  # the newest step only, step bounds ignored
    body = client.get(url, {"stop_reason": "max_steps", "step_max": 3}).json()
    assert [s["stop_reason_text"] for s in body["results"]] == ["cut off: the environment's step limit"] * 2
    first = client.get(url, {"step_max": 3}).json()
    assert first["env_tags"] == ["FrozenLake", "Sokoban"] and first["steps"] == [3, 4]
    with_frames = first["results"][0]
    assert with_frames["turns"][0]["role"] == "user"
    assert with_frames["frames_url"] == reverse("tracking:rollout_frames", args=[with_frames["id"]])
    assert first["results"][1]["frames_url"] is None
    assert first["results"][0]["turns"][1]["stop_reason_text"] == "ended: the model wrote its end-of-sequence token"
    assert client.get(url, {"sort": "prompt"}).status_code == 400


def test_frames_are_served_from_the_run_directory_only(agentic_run, user, other_user, make_run, tmp_path) -> None:
    with_frames = RolloutSample.objects.get(run=agentic_run, step=3, group_id=0, sample_index=0)
    url = reverse("tracking:rollout_frames", args=[with_frames.pk])
    answer = login(user).get(url)
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/plain")
    assert answer.content.decode().startswith("# reset\nP..G")
    assert login(other_user).get(url).status_code == 404  # another team's run does not exist
    # A sample naming a file outside its run's directory (another run's, /etc, a symlink out) gets nothing.
    other_run = make_run(user=user)
    elsewhere = other_run.run_dir / "render" / "x.txt"
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_text("another run's frames")
    link = agentic_run.run_dir / "render" / "link.txt"
    link.symlink_to(elsewhere)
    for path in (str(elsewhere), "/etc/passwd", str(link), str(agentic_run.run_dir / "render" / ".." / ".." / "run-x")):
        RolloutSample.objects.filter(pk=with_frames.pk).update(render_path=path)
        assert login(user).get(url).status_code == 404, path
    no_frames = RolloutSample.objects.get(run=agentic_run, step=3, group_id=0, sample_index=1)
    assert login(user).get(reverse("tracking:rollout_frames", args=[no_frames.pk])).status_code == 404


def metric_events(run_id: int, values: dict[int, float], first_seq: int, attempt: int = 1) -> list[dict]:
    return [event("metrics", run_id, first_seq + i, step, {"values": {"reward/mean": value, "actor/kl": 0.1}}, attempt,
                  time=1000.0 + step) for i, (step, value) in enumerate(values.items())]


def test_metric_summaries_follow_new_steps_and_recount_when_a_resume_rewrites_steps(make_run, user) -> None:
    run = make_run(user=user)
    ingest_events(metric_events(run.pk, {1: 0.2, 2: 0.9, 3: 0.5}, 1), publish=False)
    ingest_events(metric_events(run.pk, {4: float("nan"), 5: 0.4}, 4), publish=False)
    summary = MetricSummary.objects.get(run=run, key="reward/mean")
    assert (summary.points, summary.last_step, summary.last_value) == (5, 5, 0.4)
    assert (summary.min_value, summary.max_value, summary.first_time) == (0.2, 0.9, 1001.0)
    # attempt 2 resumes from step 1's checkpoint and logs steps 2-3 again: the 0.9 it overwrote is gone
    ingest_events(metric_events(run.pk, {2: 0.3, 3: 0.35}, 6, attempt=2), publish=False)
    summary.refresh_from_db()
    assert (summary.points, summary.last_step, summary.last_value) == (5, 5, 0.4)
    assert (summary.min_value, summary.max_value) == (0.2, 0.4)
    assert selectors.metric_keys(run) == ["actor/kl", "reward/mean"]
    snapshot = selectors.run_snapshot(run, lazy=True)
    assert snapshot["series"] == {} and [m["key"] for m in snapshot["metrics"]] == ["actor/kl", "reward/mean"]
    assert selectors.run_snapshot(run)["series"]["reward/mean"]["step"] == [1, 2, 3, 4, 5]


def summary_row(run, key: str) -> tuple:
    s = MetricSummary.objects.get(run=run, key=key)
    return s.points, s.last_step, s.last_value, s.min_value, s.max_value, s.first_time


def test_a_redelivered_final_batch_changes_no_summary_and_a_relogged_last_step_is_recounted(make_run, user) -> None:
    """The stream delivers the last metrics batch again (a consumer died before its ack): same step as
    the summary's last, same seq. Nothing may change, the point count included. A resumed attempt that
    logs that last step again with another value replaces it: the overwritten value leaves min and max."""
    run = make_run(user=user)
    batches = metric_events(run.pk, {1: 0.2, 2: 0.9, 3: 0.5}, 1)
    for batch in batches:  # one ingest call per event, as the stream consumer reads them live
        ingest_events([batch], publish=False)
    # by hand: 3 points, last (3, 0.5), min 0.2, max 0.9, first at 1000 + step 1; actor/kl is 0.1 each step
    assert summary_row(run, "reward/mean") == (3, 3, 0.5, 0.2, 0.9, 1001.0)
    assert summary_row(run, "actor/kl") == (3, 3, 0.1, 0.1, 0.1, 1001.0)

    for _ in range(2):
        ingest_events([batches[-1]], publish=False)
    assert summary_row(run, "reward/mean") == (3, 3, 0.5, 0.2, 0.9, 1001.0)
    assert summary_row(run, "actor/kl") == (3, 3, 0.1, 0.1, 0.1, 1001.0)

    # attempt 2 (resumed from step 2's checkpoint) logs step 3 again: 0.95 replaces 0.5
    ingest_events(metric_events(run.pk, {3: 0.95}, 4, attempt=2), publish=False)
    assert summary_row(run, "reward/mean") == (3, 3, 0.95, 0.2, 0.95, 1001.0)
    ingest_events(metric_events(run.pk, {3: 0.05}, 5, attempt=2), publish=False)  # and once more, lower
    assert summary_row(run, "reward/mean") == (3, 3, 0.05, 0.05, 0.9, 1001.0)  # 0.95 is gone


def test_history_shows_metric_columns_duration_and_sorts_on_them(make_run, user, other_user) -> None:
    runs = []
    for i, (best, last) in enumerate([(0.9, 0.5), (0.7, 0.7), (0.95, 0.1)]):
        run = make_run(user=user, name=f"exp {i}", status=RunStatus.SUCCEEDED)
        run.started_at = timezone.now() - timedelta(minutes=10 * (i + 1))
        run.finished_at = run.started_at + timedelta(minutes=[3, 30, 1][i])
        run.save()
        ingest_events(metric_events(run.pk, {1: best, 2: last}, 1), publish=False)
        runs.append(run)
    make_run("beta", user=other_user)  # not in the table
    client = login(user)
    page = client.get(reverse("tracking:history"), {"metrics": "reward/mean", "sort": "-m0.best"}).content.decode()
    order = [int(n) for n in re.findall(r'<tr data-run="(\d+)"', page)]
    assert order == [runs[2].pk, runs[0].pk, runs[1].pk]
    assert "30 min 00 s" in page and "<code>reward/mean</code>" in page
    by_last = client.get(reverse("tracking:history"), {"metrics": "reward/mean", "sort": "m0.last"}).content.decode()
    assert [int(n) for n in re.findall(r'<tr data-run="(\d+)"', by_last)] == [runs[2].pk, runs[0].pk, runs[1].pk]
    minimum = client.get(reverse("tracking:history"), {"metrics": "reward/mean:min", "sort": "-m0.best"}).content.decode()
    assert [int(n) for n in re.findall(r'<tr data-run="(\d+)"', minimum)] == [runs[1].pk, runs[0].pk, runs[2].pk]
    by_duration = client.get(reverse("tracking:history"), {"sort": "-duration", "q": "exp"}).content.decode()
    assert [int(n) for n in re.findall(r'<tr data-run="(\d+)"', by_duration)] == [runs[1].pk, runs[0].pk, runs[2].pk]
    # the sort links keep the filters and the columns (the whole view is in the URL)
    (link,) = re.findall(r'<a class="sort active" href="\?([^"]*)"', by_duration)
    assert sorted(link.split("&amp;")) == ["q=exp", "sort=duration"]  # a second click sorts ascending


def test_compare_adds_and_removes_runs_in_the_url(make_run, user, other_user) -> None:
    a, b = make_run(user=user), make_run(user=user)
    outsider = make_run("beta", user=other_user)
    client = login(user)
    url = reverse("tracking:compare")
    added = client.get(url, {"runs": str(a.pk), "add": str(b.pk)})
    assert added.status_code == 302 and added["Location"] == f"{url}?runs={a.pk},{b.pk}"
    removed = client.get(url, {"runs": f"{a.pk},{b.pk}", "remove": str(a.pk)})
    assert removed["Location"] == f"{url}?runs={b.pk}"
    page = client.get(url, {"runs": f"{a.pk},{outsider.pk}"}).content.decode()
    assert f"Not in your teams: {outsider.pk}" in page
    assert f'<option value="{b.pk}">' in page and f'<option value="{a.pk}">' not in page  # candidates to add


def test_chart_pins_are_per_user(user, other_user) -> None:
    url = reverse("tracking:api-chart-pins")
    client = login(user)
    assert client.post(url, {"key": "reward/mean", "pinned": True}, content_type="application/json").json() == {
        "keys": ["reward/mean"]}
    client.post(url, {"key": "actor/kl", "pinned": True}, content_type="application/json")
    client.post(url, {"key": "reward/mean", "pinned": True}, content_type="application/json")  # idempotent
    assert client.get(url).json() == {"keys": ["reward/mean", "actor/kl"]}
    assert client.post(url, {"key": "reward/mean", "pinned": False}, content_type="application/json").json() == {
        "keys": ["actor/kl"]}
    assert login(other_user).get(url).json() == {"keys": []}
    assert Client().get(url).status_code in (401, 403)


def test_log_lines_keep_colours_for_the_page_and_lose_them_for_readers() -> None:
    line = "\x1b[31mred\x1b[0m plain \x1b[2K\x1b[1;32mbold green\x1b[0m\x1b]0;title\x07"
    assert selectors.log_colours(line) == "\x1b[31mred\x1b[0m plain \x1b[1;32mbold green\x1b[0m"
    assert selectors.log_text(line) == "red plain bold green"


def test_every_stop_and_done_reason_of_the_trainer_has_words() -> None:
    from trainer.envs.base import DONE_REASONS
    from trainer.rollout.base import STOP_REASONS

    for reason in (*STOP_REASONS, *DONE_REASONS):
        assert selectors.stop_reason_words(reason) != reason, reason


def trainer_async_keys() -> set[str]:
    """The `async/` metric keys the trainer writes: literal keys, and the off-policy ratio statistics it
    prefixes with `async/` (trainer/pipeline/learner.py: f"async/{k}" over importance_ratio_stats)."""
    literal = set()
    for path in ("trainer/pipeline/rlvr.py", "trainer/pipeline/learner.py", "trainer/pipeline/async_rollout.py"):
        literal |= set(re.findall(r'"(async/[a-z_]+)"', (REPO_ROOT / path).read_text()))
    stats = (REPO_ROOT / "trainer/algorithms/off_policy.py").read_text()
    body = stats[stats.index("def importance_ratio_stats"):]
    body = body.split("\ndef ")[0]
    return literal | {f"async/{k}" for k in re.findall(r'"(is_ratio_[a-z_]+)"', body)}


def test_the_async_panel_draws_keys_the_trainer_writes() -> None:
    written = trainer_async_keys()
    drawn = {key for chart in ASYNC_CHARTS for key in chart["keys"]}
    assert {"async/staleness_mean", "async/is_ratio_mean", "async/generation_idle_s"} <= written  # the scan works
    assert drawn <= written, f"the panel names keys the trainer does not write: {sorted(drawn - written)}"
    assert written - drawn <= {"async/stale_weight_mean"}, sorted(written - drawn)  # drawn on its own in the panel
