"""The dashboards as a W&B user tries them, in a real Chromium against the real web stack (daphne + ingest),
the trainer's own EventEmitter driven by the test (issue 16):

- the run page: phases while starting, charts grouped by prefix and drawn only as they scroll into view,
  metric search, pinned charts remembered for the user, log-scale and time-since-start axes, CSV of a chart,
  the async-rollout panel, and a log tail (driver output with colours, trainer log events) that grows
  without a reload;
- the rollout inspector: filters and sort in the URL survive a reload, a step scrubber, rounded numbers with
  the exact value on hover, stop reasons in words, agentic trajectories as a conversation with their
  untrained tokens greyed and their rendered frames;
- the editor's basic view saves a valid experiment (and a refused save says why);
- compare adds a run and follows both live.

Screenshots go to var/screenshots/ for a reviewer.
"""

from __future__ import annotations

import csv
import io
import re
import uuid
from pathlib import Path

import pytest

from tests.platform.web_stack import (
    emitter_for,
    ingested,
    off_the_browser_thread,
    sign_in,
)

pytestmark = pytest.mark.e2e
REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO_ROOT / "var" / "screenshots"
# What an async run logs each step (trainer/pipeline/rlvr.py, async_rollout.py, algorithms/off_policy.py).
ASYNC_KEYS = ("async/staleness_min", "async/staleness_mean", "async/staleness_max", "async/generation_idle_s",
              "async/training_idle_s", "async/weight_sync_s", "async/weight_load_s", "async/is_ratio_mean",
              "async/is_ratio_min", "async/is_ratio_max", "async/policy_version", "async/buffer_batches")
PREFIXES = ("reward", "eval", "actor", "critic", "timing")


def shot(page, name: str, *, scroll: bool = False) -> None:
    """A full-page screenshot; `scroll` first walks down the page so that every lazy chart is drawn."""
    if scroll:
        height = page.evaluate("() => document.body.scrollHeight")
        for y in range(0, height, 600):
            page.evaluate(f"() => window.scrollTo(0, {y})")
            page.wait_for_timeout(150)
        page.evaluate("() => window.scrollTo(0, 0)")
        page.wait_for_timeout(500)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)



def make_run(web_user, name: str = "", config: dict | None = None, **fields):
    from policylab.experiments.models import Experiment, Run

    experiment = Experiment.objects.create(
        project=web_user.project, name=name or f"e2e {uuid.uuid4().hex[:6]}", config=config or {"max_steps": 20},
        config_yaml="max_steps: 20\n", config_hash=uuid.uuid4().hex,
    )
    return Run.objects.create(experiment=experiment, created_by=web_user.user, **fields)



def step_metrics(step: int, with_async: bool = True) -> dict[str, float]:
    """Six keys under each of five prefixes, and the async panel's keys."""
    values = {f"{prefix}/m{i}": (step + i) / 10 for prefix in PREFIXES for i in range(6)}
    values["reward/mean"] = 0.7333333492279053 * step
    if with_async:
        values |= {key: float(step % 3) + i / 10 for i, key in enumerate(ASYNC_KEYS)}
    return values


class FakeRay:
    """The Ray job client as the supervisor's sync_logs uses it: the driver's output so far."""

    def __init__(self) -> None:
        self.output = ""

    def get_job_logs(self, submission_id: str) -> str:
        return self.output



def metric_requests(page) -> list[str]:
    return page.evaluate("""() => performance.getEntriesByType("resource").map((e) => e.name)
        .filter((name) => name.includes("/metrics/?"))""")


def test_run_page_lazy_charts_search_pins_axes_csv_async_panel_phases_and_live_log(
    page, web_user, tracking_stack, settings
) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunAttempt, RunStatus
    from policylab.jobs.supervisor import sync_logs

    run = make_run(web_user, "dashboard", status=RunStatus.STARTING)
    attempt = RunAttempt.objects.create(run=run, number=1, ray_job_id="job-e2e", status=RunStatus.RUNNING)
    emitter = emitter_for(run, tracking_stack)
    for step in range(1, 4):  # history before the page opens: its charts come from the downsampling API
        emitter.metrics(step_metrics(step), step)
    ingested(run, emitter.seq, timeout=30)
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#live-state")).to_have_text("live")
    page.evaluate("() => { window.__sameDocument = true; }")

    # Phases: the trainer's start phases under "starting", then running.
    emitter.status("starting", 0, total_steps=20, message="placing workers")
    expect(page.locator("#run-phases li.current")).to_have_text("starting")
    expect(page.locator("#start-phases")).to_contain_text("placing workers")
    emitter.status("starting", 0, total_steps=20, message="loading model: actor_train")
    expect(page.locator("#start-phases li")).to_have_count(2)
    expect(page.locator("#run-phases li.done")).to_have_count(2)  # queued, submitting

    # Charts: 30 + 1 metric keys grouped by prefix, and the async panel first (after pins).
    expect(page.locator("#charts figure.chart-card")).to_have_count(31 + 5)  # 5 panel charts hold the 12 async keys
    groups = page.locator("#charts section.chart-group").evaluate_all("(s) => s.map((x) => x.dataset.group)")
    assert groups == ["async", "reward", "eval", "actor", "critic", "timing"], groups
    staleness = page.locator('figure[data-chart="panel:Staleness (policy versions behind)"] div.chart')
    expect(staleness).to_have_attribute("data-points", "3")
    assert page.evaluate("(div) => div.data.length", staleness.element_handle()) == 3  # min, mean, max together
    # Lazy: only charts near the screen were asked for; the last group's were not, until scrolled to.
    asked = " ".join(metric_requests(page))
    assert "reward%2Fm0" in asked and "timing%2Fm5" not in asked
    bottom = page.locator('div.chart[data-key="timing/m5"]')
    expect(bottom).to_have_attribute("data-points", "0")
    bottom.scroll_into_view_if_needed()
    expect(bottom).to_have_attribute("data-points", "3")
    assert "timing%2Fm5" in " ".join(metric_requests(page))
    page.evaluate("() => window.scrollTo(0, 0)")

    # Live points reach the charts on screen without a reload.
    emitter.status("running", 3, total_steps=20, eta_s=30)
    for step in (4, 5):
        emitter.metrics(step_metrics(step), step)
    reward = page.locator('div.chart[data-key="reward/mean"]')
    reward.scroll_into_view_if_needed()
    expect(reward).to_have_attribute("data-points", "5")
    expect(page.locator("#run-phases li.current")).to_have_text("running")
    expect(page.locator("#start-phases")).to_be_hidden()
    expect(page.locator("#run-message")).to_be_hidden()  # no message: no empty slot between the separators
    expect(page.locator("#live-state")).to_be_visible()

    # Search: text or a regular expression over keys.
    page.fill("#metric-search", "m5$")
    expect(page.locator("#charts figure.chart-card:visible")).to_have_count(5)
    expect(page.locator("#chart-count")).to_have_text("5 of 36 charts")
    page.fill("#metric-search", "staleness")
    expect(page.locator("#charts figure.chart-card:visible")).to_have_count(1)
    page.fill("#metric-search", "")

    # Pin a chart: it moves to the top and stays there on the next visit (the pin is the user's, stored).
    page.locator('figure[data-chart="actor/m2"] .chart-pin').click()
    expect(page.locator('section[data-group="pinned"] figure[data-chart="actor/m2"]')).to_be_visible()
    page.wait_for_function("() => fetch('/api/chart-pins/').then((r) => r.json()).then((b) => b.keys.includes('actor/m2'))")

    # Log-scale y and time since the run's start on x.
    page.check("#log-y")
    reward.scroll_into_view_if_needed()
    expect(reward).to_have_attribute("data-log-y", "true")
    assert page.evaluate("(div) => div.layout.yaxis.type", reward.element_handle()) == "log"
    page.select_option("#x-axis", "relative")
    expect(reward).to_have_attribute("data-axis", "relative")
    xs = page.evaluate("(div) => div.data[0].x", reward.element_handle())
    assert xs[0] == 0 and xs == sorted(xs)
    assert "time since start" in page.evaluate("(div) => div.layout.xaxis.title.text", reward.element_handle())
    page.select_option("#x-axis", "step")
    page.uncheck("#log-y")

    # CSV of what the chart shows (smoothing on: the raw and the smoothed trace).
    set_range = "([id, value]) => { const el = document.getElementById(id); el.value = value; el.dispatchEvent(new Event('input')); }"
    page.evaluate(set_range, ["smoothing", "0.5"])
    with page.expect_download() as download:
        page.locator('figure[data-chart="reward/mean"] .chart-csv').click()
    rows = list(csv.reader(io.StringIO(Path(download.value.path()).read_text())))
    assert rows[0] == ["trace", "step", "value"] and len(rows) == 1 + 2 * 5
    assert {r[0] for r in rows[1:]} == {"reward/mean", "reward/mean (raw)"}
    assert [float(r[2]) for r in rows[1:] if r[0] == "reward/mean (raw)"] == [0.7333333492279053 * s for s in range(1, 6)]
    page.evaluate(set_range, ["smoothing", "0"])

    # The log tail: the driver's output as the supervisor stores it, with colours, and the trainer's log events.
    ray = FakeRay()
    ray.output = "\x1b[31mWARNING\x1b[0m worker 0 slow\n"
    off_the_browser_thread(lambda: sync_logs(ray, run, attempt, final=False))
    expect(page.locator("#log-tail .ansi-fg-31")).to_have_text("WARNING")
    emitter.log("info", ["trainer: step 5 done"], 5)
    ray.output += "step 5 reward 3.67\n"
    off_the_browser_thread(lambda: sync_logs(ray, run, attempt, final=False))
    expect(page.locator("#log-tail .log-line")).to_have_count(3)
    expect(page.locator("#log-tail")).to_contain_text("trainer: step 5 done")
    expect(page.locator("#log-tail")).to_contain_text("step 5 reward 3.67")
    assert page.evaluate("() => window.__sameDocument") is True  # all of it without a reload
    shot(page, "run_page", scroll=True)
    page.locator("section.async-panel").screenshot(path=str(SCREENSHOTS / "run_page_async_panel.png"))

    page.reload()
    expect(page.locator('section[data-group="pinned"] figure[data-chart="actor/m2"]')).to_be_visible()
    expect(page.locator("#log-tail .log-line")).to_have_count(3)  # the same tail after a reload
    emitter.close()


def trajectory(i: int, step: int, frames: str | None) -> dict:
    """An agentic rollout sample as trainer/pipeline/agentic.py emits it."""
    success = i % 2 == 0
    turns = [{"role": "user", "text": "You are at P; reach G.\nP.\n.G", "tokens": 12, "loss": False}]
    for k in range(1 + i % 3):
        turns += [{"role": "assistant", "text": f"<answer>{'down' if k else 'right'}</answer>", "tokens": 5, "loss": True,
                   "reward": 0.25 * (k + 1), "penalty": 0.0 if k else -0.1, "format_ok": bool(k),
                   "action": "down" if k else None, "stop_reason": "eos"},
                  {"role": "user", "text": f".P\n.G  (after move {k + 1})", "tokens": 6, "loss": False}]
    sample = {
        "prompt": "You are at P; reach G.", "response": "…", "reward": 0.7333333492279053 if success else -0.1,
        "advantage": 0.123456789 if success else -0.5, "prompt_length": 12, "response_length": 11 * (1 + i % 3),
        "stop_reason": "success" if success else "max_steps", "group_id": i // 2, "sample_index": i % 2,
        "tokens": ["<answer>", "right", "</answer>", "\n.P"], "token_logprobs": [-0.1, -1.5, -0.2, -0.3],
        "token_advantages": [0.1, 0.1, 0.1, 0.0], "token_mask": [1, 1, 1, 0],
        "env_tag": "FrozenLake" if i < 4 else "Sokoban", "success": success, "num_turns": 1 + i % 3,
        "done_reason": "success" if success else "max_steps", "turns": turns,
    }
    if frames:
        sample["render_path"] = frames
    return sample


def test_inspector_view_lives_in_the_url_and_trajectories_read_as_conversations(
    page, web_user, tracking_stack, settings
) -> None:
    from playwright.sync_api import expect

    run = make_run(web_user, "agentic")
    emitter = emitter_for(run, tracking_stack)
    for step in (1, 2, 3):
        folder = run.run_dir / "render" / f"step_{step}"
        folder.mkdir(parents=True)
        frames = folder / "0_0_FrozenLake.txt"
        frames.write_text(f"# reset\nP.\n.G\n\n# after reply 1\n.P\n.G\n(step {step})\n")
        emitter.rollouts([trajectory(i, step, str(frames) if i == 0 else None) for i in range(8)], step)
    emitter.close()
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/rollouts/")
    expect(page.locator("#rollout-summary")).to_contain_text("8 samples match at step 3, the latest")
    expect(page.locator("#rollout-summary")).to_contain_text("samples at 3 steps (1–3)")

    # Filters and sort go to the URL and come back from it after a reload.
    page.select_option("select[name=env_tag]", "FrozenLake")
    page.select_option("select[name=success]", "true")
    page.select_option("select[name=sort]", "-reward")
    page.click("#filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"env_tag=FrozenLake"))
    assert "success=true" in page.url and "sort=-reward" in page.url
    expect(page.locator(".sample")).to_have_count(2)
    page.reload()
    expect(page.locator("select[name=env_tag]")).to_have_value("FrozenLake")
    expect(page.locator("select[name=sort]")).to_have_value("-reward")
    expect(page.locator(".sample")).to_have_count(2)
    expect(page.locator("#rollout-summary")).to_contain_text("2 samples match")

    # The step scrubber: an exact step, in the URL too.
    page.locator("#step-prev").click()
    expect(page).to_have_url(re.compile(r"[?&]step=2(&|$)"))  # the one step shown; filters untouched
    expect(page.locator("#step-label")).to_contain_text("step 2 (2 of 3 steps with samples)")
    expect(page.locator("#rollout-summary")).to_contain_text("2 samples match at step 2")

    # Numbers rounded, exact on hover; the stop reason in words.
    sample = page.locator('.sample').first
    reward = sample.locator(".meta .num").first
    expect(reward).to_have_text("0.7333")
    expect(reward).to_have_attribute("title", "0.7333333492279053")
    expect(sample.locator(".stop")).to_have_text("episode solved")

    # A trajectory: the conversation turn by turn, per-turn reward, penalty and action, untrained tokens grey.
    trajectory_card = page.locator(".sample.trajectory").first
    expect(trajectory_card.locator(".turn")).to_have_count(3)
    expect(trajectory_card.locator(".turn-assistant .turn-head")).to_contain_text("penalty")
    expect(trajectory_card.locator(".turn-assistant .turn-head")).to_contain_text("format broken")
    trajectory_card.locator(".trajectory-tokens summary").click()
    expect(trajectory_card.locator(".tokens span.masked")).to_have_count(1)
    expect(trajectory_card.locator(".tokens span.masked")).to_have_text(re.compile(r"\.P"))
    trajectory_card.locator(".frames summary").click()
    expect(trajectory_card.locator(".frames pre")).to_contain_text("(step 2)")
    shot(page, "inspector_trajectory")

    # Regex characters are plain text (issue 34): nothing holds "(unclosed", and no stale results stay.
    page.fill("input[name=q]", "(unclosed")
    page.click("#filters button[type=submit]")
    expect(page.locator("#rollout-summary")).to_contain_text("0 samples match")
    expect(page.locator(".sample")).to_have_count(0)
    expect(page.locator("#rollout-error")).to_have_text("")


def test_basic_view_saves_a_valid_experiment_and_a_refused_save_says_why(signed_in, live_server, web_user) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import Experiment

    page = signed_in
    page.goto(f"{live_server.url}/projects/{web_user.project.pk}/experiments/new/")
    expect(page.locator("#check-state")).to_have_text("valid")
    expect(page.locator('[name="rollout_batch_size"]')).to_be_visible()  # a common field
    expect(page.locator('[name="ppo_epochs"]')).to_be_hidden()  # one click away
    expect(page.locator('#memory-table tr[data-role="actor_train"]')).to_contain_text("fits")
    shot(page, "editor_basic")
    page.fill('[name="rollout_batch_size"]', "32")
    page.fill('[name="actor_train.training_args.learning_rate"]', "0.001")
    expect(page.locator("#check-state")).to_have_text("valid")
    page.click("#save")  # no name
    expect(page.locator("#save-errors")).to_contain_text("an experiment needs a name")
    expect(page.locator("#name-errors")).to_have_text("an experiment needs a name")
    expect(page.locator("#check-state")).to_have_text("valid")  # the live check ran after the refusal ...
    expect(page.locator("#save-errors")).to_be_visible()  # ... and did not hide why nothing was saved
    expect(page.locator('[name="rollout_batch_size"]')).to_have_value("32")  # what was typed stays
    page.click('[data-view="full"]')
    expect(page.locator('[name="ppo_epochs"]')).to_be_visible()
    shot(page, "editor_full")
    page.click('[data-view="basic"]')
    page.fill("#exp-name", "basic view")
    page.click("#save")
    page.wait_for_url(re.compile(r"/experiments/\d+/$"))
    experiment = Experiment.objects.get(name="basic view")
    assert experiment.config["rollout_batch_size"] == 32
    assert experiment.config["actor_train"]["training_args"]["learning_rate"] == 0.001
    assert experiment.config["ppo_epochs"] == 1  # a field the basic view hid kept its value


def test_compare_adds_a_run_and_follows_both_live(page, web_user, tracking_stack, settings) -> None:
    from playwright.sync_api import expect

    first = make_run(web_user, "baseline")
    second = make_run(web_user, "higher lr", config={"max_steps": 20, "actor_train": {"training_args": {"learning_rate": 3e-6}}})
    emitters = {run.pk: emitter_for(run, tracking_stack) for run in (first, second)}
    for step in (1, 2, 3):
        for run, scale in ((first, 1.0), (second, 1.5)):
            emitters[run.pk].metrics({"reward/mean": scale * step / 10, "actor/kl": 0.01 * step}, step)
    ingested(second, emitters[second.pk].seq, timeout=30)
    sign_in(page, tracking_stack, web_user.user)
    # History: the metric's last and best as columns, sorted by the best, every choice in the URL.
    page.goto(f"{tracking_stack.url}/history/?metrics=reward/mean&sort=-m0.best")
    expect(page.locator("#history tbody tr").first).to_have_attribute("data-run", str(second.pk))
    expect(page.locator(f'#history tr[data-run="{second.pk}"] td.metric').first).to_have_text("0.45")
    shot(page, "history")
    page.goto(f"{tracking_stack.url}/compare/?runs={first.pk}")
    reward = page.locator('div.chart[data-key="reward/mean"]')
    expect(reward).to_have_attribute("data-points", "3")
    page.select_option("#add-run-select", str(second.pk))
    page.click("#add-run button[type=submit]")
    expect(page).to_have_url(re.compile(rf"\?runs={first.pk},{second.pk}$"))
    expect(page.locator("#live-runs")).to_have_text("· 2 of 2 runs live")
    page.click("#config-diff-details summary")  # collapsed under the runs: the charts come first
    expect(page.locator("#config-diff")).to_be_visible()
    expect(reward).to_have_attribute("data-points", "3")
    assert page.evaluate("(div) => div.data.map((t) => t.name)", reward.element_handle()) == [
        f"run {first.pk}", f"run {second.pk}"]
    page.evaluate("() => { window.__sameDocument = true; }")
    for step in (4, 5):
        emitters[second.pk].metrics({"reward/mean": 1.5 * step / 10, "actor/kl": 0.01 * step}, step)
    expect(reward).to_have_attribute("data-points", "5")  # the second run's curve grew, no reload
    lengths = page.evaluate("(div) => div.data.map((t) => t.x.length)", reward.element_handle())
    assert lengths == [3, 5] and page.evaluate("() => window.__sameDocument") is True
    page.select_option("#x-axis", "relative")
    starts = page.evaluate("(div) => div.data.map((t) => t.x[0])", reward.element_handle())
    assert starts == [0, 0]  # runs started at different times line up
    page.select_option("#x-axis", "step")
    shot(page, "compare")
    page.locator(f'li[data-run="{first.pk}"] a.remove').click()
    expect(page).to_have_url(re.compile(rf"\?runs={second.pk}$"))
    for emitter in emitters.values():
        emitter.close()
