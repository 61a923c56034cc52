"""Issue 46, items 1–3, in a real Chromium: the views a user reads keep out of the way.

- compare shows its charts first: with four runs whose configs differ widely, the first chart is inside the
  first screen, the config diff is collapsed with the number of differing keys in its summary, and a key set to
  None in one run and absent in another is not a difference (item 1);
- nothing is wider than its card at 1,400 and 1,024 px: the experiment page's original file beside the native
  config, compare's config table, History with three metric columns (item 2);
- the rollout inspector on a run that keeps producing steps keeps what the user opened: following pauses while
  a section is open or the user has scrolled, says so with a control that resumes it, and unticking "follow"
  keeps the step being read (item 3).
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.test_view_state import add_samples, make_run, rollout_requests
from tests.platform.web_stack import emitter_for, ingested, sign_in

pytestmark = pytest.mark.e2e
REPO_ROOT = Path(__file__).resolve().parents[2]
# Four shipped examples with little in common: GRPO, agentic tool calls, PPO with a critic, dynamic sampling.
EXAMPLES = ("demo_grpo_cpu", "agentic_tools_cpu", "demo_ppo_cpu", "demo_grpo_dynamic_sampling_cpu")
ABSENT = object()


def compared_runs(web_user, stack) -> list:
    """One succeeded run per example (its experiment saved from the file, as the editor does), each with
    a few reward and KL points ingested."""
    from policylab.experiments import services
    from policylab.experiments.models import Run, RunStatus

    runs = []
    for name in EXAMPLES:
        experiment = services.create_experiment(web_user.project, name, (REPO_ROOT / "examples" / f"{name}.yaml")
                                                .read_text(), user=web_user.user)
        runs.append(Run.objects.create(experiment=experiment, created_by=web_user.user, status=RunStatus.SUCCEEDED))
    for i, run in enumerate(runs):
        emitter = emitter_for(run, stack)
        for step in (1, 2, 3):
            emitter.metrics({"reward/mean": (i + step) / 10, "actor/kl": 0.01 * step}, step)
        emitter.close()
        ingested(run, emitter.seq, timeout=30)
    return runs


def differing_keys(configs: list[dict]) -> tuple[int, int]:
    """(keys whose values differ between the flat configs, those of them that differ only as None against a
    missing key): what the compare page should count, counted here on its own."""
    from policylab.experiments.flat_config import flatten

    flat = [flatten(c) for c in configs]
    keys = set().union(*flat)
    differ = [k for k in keys if len({repr(c.get(k, ABSENT)) for c in flat}) > 1]
    none_only = [k for k in differ if all(c.get(k) is None for c in flat)]
    return len(differ), len(none_only)


def test_compare_shows_its_charts_first_and_the_config_diff_collapsed(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    runs = compared_runs(web_user, tracking_stack)
    differ, none_only = differing_keys([run.experiment.config for run in runs])
    assert differ > 200 and none_only > 50  # configs that differ widely, many keys as None against absent
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/compare/?runs={','.join(str(run.pk) for run in runs)}")
    first = page.locator("#charts figure.chart-card").first
    expect(first).to_be_visible()
    viewport = page.viewport_size
    assert first.bounding_box()["y"] + 100 < viewport["height"], "the first chart starts below the first screen"
    expect(page.locator('div.chart[data-key="reward/mean"]')).to_have_attribute("data-points", "3")  # drawn

    details = page.locator("details#config-diff-details")
    expect(details).not_to_have_attribute("open", re.compile(".*"))  # collapsed
    expect(page.locator("#config-diff")).to_be_hidden()
    counted = differ - none_only
    expect(details.locator("summary")).to_contain_text(f"{counted} config keys differ")
    expect(details.locator("summary")).to_contain_text(f"{none_only} None against absent, not counted")
    details.locator("summary").click()
    rows = page.locator("#config-diff tbody tr")
    expect(rows).to_have_count(counted)
    cells = page.evaluate("""() => [...document.querySelectorAll("#config-diff tbody tr")].map(
        (tr) => [...tr.querySelectorAll("td")].slice(1).map((td) => td.textContent.trim()))""")
    assert not [row for row in cells if set(row) <= {"None", "—"}], "a None-against-absent row is listed"


# What of `card` (the card itself included) lies outside its box, left or right, as the user sees it: an
# element inside a scroll container counts only by its part that container shows.
OVERFLOW = """(card) => {
  const box = card.getBoundingClientRect();
  const out = box.left < -0.5 || box.right > document.documentElement.clientWidth + 0.5 ? ["the card itself"] : [];
  for (const el of card.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (!r.width) continue;
    let left = r.left, right = r.right;
    for (let up = el.parentElement; up && up !== card; up = up.parentElement) {
      if (getComputedStyle(up).overflowX === "visible") continue;
      const clip = up.getBoundingClientRect();
      left = Math.max(left, clip.left);
      right = Math.min(right, clip.right);
    }
    if (right <= left) continue;  // scrolled out of sight
    if (left < box.left - 0.5 || right > box.right + 0.5) {
      out.push(`${el.tagName.toLowerCase()}#${el.id}.${el.className} ${Math.round(r.width)} px`);
    }
  }
  return out;
}"""


def assert_fits(page, what: str, width: int) -> None:
    """The page no wider than the window, and every card's (and the main column's) content inside it."""
    wide = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert wide[0] <= wide[1], f"{what} at {width} px: the page is {wide[0]} px wide"
    for card in page.locator("main, main .card").all():
        if card.is_visible():
            assert card.evaluate(OVERFLOW) == [], f"{what} at {width} px: {card.evaluate('(c) => c.id || c.className')}"


def test_nothing_is_wider_than_its_card_at_1400_and_1024_px(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import Experiment, Run, RunStatus
    from policylab.tracking.ingest import ingest_events
    from tests.platform.tracking.conftest import event

    runs = compared_runs(web_user, tracking_stack)
    agentic = runs[1].experiment
    assert agentic.source_text and agentic.source_text != agentic.config_yaml  # the page shows both
    for name, rewards in (("low lr", [0.1, 0.3, 0.2]), ("high lr with a long experiment name", [0.4, 0.123456789])):
        experiment = Experiment.objects.create(project=web_user.project, name=name, config={"max_steps": 3},
                                               config_yaml="", config_hash=uuid.uuid4().hex, tags=["sweep", "lr"])
        run = Run.objects.create(experiment=experiment, created_by=web_user.user, status=RunStatus.SUCCEEDED,
                                 current_step=3, total_steps=3)
        ingest_events([event("metrics", run.pk, step, step, {"values": {
            "reward/mean": value, "actor/kl_divergence_to_reference": value / 10,
            "response_length/clip_ratio_mean": value / 3}}) for step, value in enumerate(rewards, start=1)],
            run_id=run.pk, publish=False)
    sign_in(page, tracking_stack, web_user.user)
    pages = {
        "the experiment page": f"/experiments/{agentic.pk}/",
        "compare": f"/compare/?runs={','.join(str(run.pk) for run in runs)}",
        "History": "/history/?metrics=reward/mean,actor/kl_divergence_to_reference:min,"
                   "response_length/clip_ratio_mean:min",
    }
    for width in (1400, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        for what, path in pages.items():
            page.goto(f"{tracking_stack.url}{path}")
            if what == "the experiment page":
                expect(page.locator("#original-config")).to_be_visible()
            elif what == "compare":
                page.locator("#config-diff-details summary").click()
                page.locator("#environment-diff-details summary").click()
                expect(page.locator("#config-diff")).to_be_visible()
                expect(page.locator("#charts figure.chart-card").first).to_be_visible()
            else:
                expect(page.locator("#history td.metric")).to_have_count(6 * 2 * 3)  # six runs, three metrics
            assert_fits(page, what, width)


def test_the_inspector_keeps_what_the_user_opened_on_a_run_that_keeps_producing_steps(
    signed_in, live_server, web_user
) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunStatus

    run = make_run(web_user, RunStatus.RUNNING)
    for step in (1, 2):
        add_samples(run, step, range(6), trajectory=True)
    page = signed_in
    page.goto(f"{live_server.url}/runs/{run.pk}/rollouts/")
    groups = page.locator("section.group")
    expect(page.locator('section.group[data-step="2"]')).to_have_count(6)  # following the latest step
    paused = page.locator("#follow-paused")
    expect(paused).to_be_hidden()

    # A section opened while following: the run goes on producing steps for 10 s, the section stays open.
    page.locator(".trajectory-tokens summary").nth(1).click()
    expect(page.locator(".trajectory-tokens[open]")).to_have_count(1)
    requests = rollout_requests(page)
    started = time.monotonic()
    for step in range(3, 8):
        add_samples(run, step, range(6), trajectory=True)
        page.wait_for_timeout(2_000)
    assert time.monotonic() - started >= 10
    expect(page.locator(".trajectory-tokens[open]")).to_have_count(1)
    expect(page.locator(".trajectory-tokens").nth(1)).to_have_attribute("open", "")
    expect(groups).to_have_count(6)
    expect(page.locator('section.group[data-step="2"]')).to_have_count(6)  # the step being read
    expect(paused).to_be_visible()
    expect(paused).to_contain_text("paused at step 2")
    expect(paused).to_contain_text("5 newer steps")  # it still asks, and says what it holds back
    assert rollout_requests(page) > requests
    assert page.locator("input[name=latest]").is_checked()

    # Resumed on the user's word: the latest step again, and it follows the next one.
    paused.get_by_role("button", name="resume following").click()
    expect(paused).to_be_hidden()
    expect(page.locator('section.group[data-step="7"]')).to_have_count(6)
    add_samples(run, 8, range(6), trajectory=True)
    expect(page.locator('section.group[data-step="8"]')).to_have_count(6, timeout=8_000)

    # Scrolling the inspector pauses it too.
    page.mouse.move(600, 600)
    page.mouse.wheel(0, 400)
    expect(paused).to_be_visible()
    expect(paused).to_contain_text("paused at step 8")
    add_samples(run, 9, range(6), trajectory=True)
    page.wait_for_timeout(4_000)
    expect(page.locator('section.group[data-step="8"]')).to_have_count(6)
    expect(groups).to_have_count(6)
    paused.get_by_role("button", name="resume following").click()
    expect(page.locator('section.group[data-step="9"]')).to_have_count(6)

    # Unticking "follow" keeps the step being read, not the whole step range.
    page.evaluate("() => window.scrollTo(0, 0)")
    page.uncheck("input[name=latest]")
    expect(page).to_have_url(re.compile(r"latest=0&step=9$"))
    page.wait_for_timeout(1_000)
    expect(groups).to_have_count(6)
    expect(page.locator('section.group[data-step="9"]')).to_have_count(6)
    expect(page.locator("#step-label")).to_have_text(re.compile(r"^step 9 \(9 of 9 steps"))
    expect(paused).to_be_hidden()
