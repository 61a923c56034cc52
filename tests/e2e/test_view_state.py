"""Issue 35, in a real Chromium: what the user opened or chose stays as it is.

- the rollout inspector keeps an opened Tokens section open while it follows a live run, and asks nothing
  more of a finished run (item 1);
- a run page's or compare page's chart view (search, smoothing, log-y, x axis) lives in its URL (item 5);
- the step scrubber walks only the step range applied (item 7);
- nothing runs past its card at 1400 px and 1024 px: the editor's memory-fit table and derived values, the
  inspector's token strip (item 10).

Samples are stored through the ORM (the inspector only reads them); the run page and compare need the web
stack's websockets.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from tests.platform.web_stack import emitter_for, ingested, sign_in

pytestmark = pytest.mark.e2e


def make_run(web_user, status: str, name: str = "view state"):
    from policylab.experiments.models import Experiment, Run

    experiment = Experiment.objects.create(project=web_user.project, name=name, config={"max_steps": 30},
                                           config_yaml="max_steps: 30\n", config_hash=uuid.uuid4().hex)
    return Run.objects.create(experiment=experiment, created_by=web_user.user, status=status)


def add_samples(run, step: int, groups: range = range(2), *, trajectory: bool = False, tokens: int = 3) -> None:
    """Two samples per GRPO group at `step`; a trajectory has turns and a (foldable) token strip."""
    from policylab.tracking.models import RolloutSample

    strip = [f"tok{i:03d}" for i in range(tokens)]  # no spaces: one long word unless the page breaks it
    extra = {"turns": [{"role": "user", "text": "You are at P.", "tokens": 4, "loss": False},
                       {"role": "assistant", "text": "<answer>down</answer>", "tokens": 3, "loss": True}],
             "env_tag": "FrozenLake", "success": True, "num_turns": 1, "token_mask": [1] * tokens} if trajectory else {}
    RolloutSample.objects.bulk_create([
        RolloutSample(run=run, step=step, group_id=g, sample_index=i, prompt=f"prompt {g}", response="".join(strip),
                      reward=1.0, advantage=0.5, response_length=tokens, stop_reason="eos", tokens=strip,
                      token_logprobs=[-0.5] * tokens, seq=step * 100 + g * 10 + i, time=time.time(), **extra)
        for g in groups for i in range(2)
    ])


def rollout_requests(page) -> int:
    return page.evaluate("""() => performance.getEntriesByType("resource")
        .filter((e) => e.name.includes("/rollouts/?")).length""")


def test_an_opened_tokens_section_stays_open_on_a_live_and_on_a_finished_run(signed_in, live_server, web_user) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunStatus

    live, finished = make_run(web_user, RunStatus.RUNNING), make_run(web_user, RunStatus.SUCCEEDED)
    for run in (live, finished):
        for step in (1, 2):
            add_samples(run, step, range(6), trajectory=True)
    pages = {live.pk: signed_in, finished.pk: signed_in.context.new_page()}
    for run_id, page in pages.items():
        page.goto(f"{live_server.url}/runs/{run_id}/rollouts/")
        expect(page.locator('section.group[data-step="2"]')).to_have_count(6)  # following the latest step
        page.locator(".trajectory-tokens summary").nth(1).click()
        expect(page.locator(".trajectory-tokens[open]")).to_have_count(1)
    page = pages[live.pk]
    assert page.evaluate("() => { window.scrollTo(0, 300); return window.scrollY; }") == 300
    add_samples(live, 2, range(6, 7), trajectory=True)  # the live run's step grows: the page redraws
    expect(page.locator(".sample")).to_have_count(14, timeout=8_000)
    page.wait_for_timeout(10_000)
    for page in pages.values():
        expect(page.locator(".trajectory-tokens[open]")).to_have_count(1)  # still open after 10 s
        expect(page.locator(".trajectory-tokens").nth(1)).to_have_attribute("open", "")  # the one opened
    assert pages[live.pk].evaluate("() => window.scrollY") == 300
    assert rollout_requests(pages[live.pk]) >= 4  # the live run is still followed ...
    assert rollout_requests(pages[finished.pk]) == 1  # ... a finished one is not asked again
    page = pages[finished.pk]
    page.select_option("select[name=colour]", "advantage")  # drawn anew in other colours: still open
    expect(page.locator(".trajectory-tokens").nth(1).locator(".tokens span").first).to_have_attribute(
        "title", re.compile(r"^advantage"))
    expect(page.locator(".trajectory-tokens").nth(1)).to_have_attribute("open", "")


def test_the_step_scrubber_stays_inside_the_applied_step_range(signed_in, live_server, web_user) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunStatus

    run = make_run(web_user, RunStatus.SUCCEEDED)
    for step in range(1, 31):
        add_samples(run, step, range(1))
    page = signed_in
    page.goto(f"{live_server.url}/runs/{run.pk}/rollouts/")
    expect(page.locator("#step-label")).to_contain_text("step 30 (30 of 30 steps with samples)")
    page.fill("input[name=step_min]", "1")
    page.fill("input[name=step_max]", "20")
    page.click("#filters button[type=submit]")
    label = page.locator("#step-label")
    expect(label).to_contain_text("20 steps with samples in steps 1–20")
    expect(page.locator("#rollout-summary")).to_contain_text("40 samples match in steps 1–20")
    page.click("#step-prev")  # from the range's end, one step back: 19, not the run's 29
    expect(label).to_have_text("step 19 (19 of 20 steps with samples in steps 1–20)")
    expect(page.locator("#rollout-summary")).to_contain_text("2 samples match at step 19")
    expect(page).to_have_url(re.compile(r"step_min=1&step_max=20&.*step=19"))
    expect(page.locator("input[name=step_max]")).to_have_value("20")  # the range stays applied
    for _ in range(2):
        page.click("#step-next")
    expect(label).to_have_text("step 20 (20 of 20 steps with samples in steps 1–20)")  # stops at the end
    expect(page.locator('section.group[data-step="20"]')).to_have_count(1)
    page.reload()  # the step and the range come back from the URL
    expect(label).to_have_text("step 20 (20 of 20 steps with samples in steps 1–20)")
    page.locator("#step-scrubber").fill("0")
    expect(label).to_have_text("step 1 (1 of 20 steps with samples in steps 1–20)")
    page.click("#step-prev")  # stops at the start
    expect(page.locator('section.group[data-step="1"] .sample')).to_have_count(2)
    expect(label).to_have_text("step 1 (1 of 20 steps with samples in steps 1–20)")


def test_a_copied_chart_url_restores_search_smoothing_log_y_and_x_axis(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunStatus

    run = make_run(web_user, RunStatus.SUCCEEDED, "chart view")
    other = make_run(web_user, RunStatus.SUCCEEDED, "other")
    emitter = emitter_for(run, tracking_stack)
    for step in (1, 2, 3):
        emitter.metrics({"reward/mean": step / 10, "actor/kl": 0.01 * step}, step)
    emitter.close()
    ingested(run, emitter.seq, timeout=30)
    sign_in(page, tracking_stack, web_user.user)
    set_range = "(value) => { const el = document.getElementById('smoothing'); el.value = value; el.dispatchEvent(new Event('input')); }"

    def choose(page) -> None:
        page.fill("#metric-search", "reward")
        page.evaluate(set_range, "0.6")
        page.check("#log-y")
        page.select_option("#x-axis", "relative")

    def restored(url: str):
        copy = page.context.new_page()
        copy.goto(url)
        expect(copy.locator("#metric-search")).to_have_value("reward")
        expect(copy.locator("#smoothing")).to_have_value("0.6")
        expect(copy.locator("#smoothing-value")).to_have_text("0.6")
        expect(copy.locator("#log-y")).to_be_checked()
        expect(copy.locator("#x-axis")).to_have_value("relative")
        reward = copy.locator('div.chart[data-key="reward/mean"]')
        expect(reward).to_have_attribute("data-log-y", "true")
        expect(reward).to_have_attribute("data-axis", "relative")
        assert copy.evaluate("(div) => div.data.map((t) => t.name)", reward.element_handle())[-1].endswith("reward/mean")
        assert len(copy.evaluate("(div) => div.data", reward.element_handle())) == 2  # raw + smoothed
        expect(copy.locator('figure[data-chart="actor/kl"]')).to_be_hidden()  # the search
        return copy

    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator('div.chart[data-key="reward/mean"]')).to_have_attribute("data-points", "3")
    choose(page)
    expect(page).to_have_url(re.compile(r"search=reward&smoothing=0.6&log_y=1&x=relative$"))
    restored(page.url).close()

    page.goto(f"{tracking_stack.url}/compare/?runs={run.pk}")
    expect(page.locator('div.chart[data-key="reward/mean"]')).to_have_attribute("data-points", "3")
    choose(page)
    expect(page).to_have_url(re.compile(rf"\?runs={run.pk}&search=reward&smoothing=0.6&log_y=1&x=relative$"))
    restored(page.url).close()
    page.select_option("#add-run-select", str(other.pk))  # adding a run keeps the view
    page.click("#add-run button[type=submit]")
    expect(page).to_have_url(re.compile(rf"\?runs={run.pk},{other.pk}&.*log_y=1"))
    expect(page.locator("#x-axis")).to_have_value("relative")


# What of `element` (itself included) lies outside its card's box, left or right, and whether the card lies
# outside the window.
OVERFLOW = """(element) => {
  const box = element.closest(".card").getBoundingClientRect();
  const inside = box.left >= 0 && box.right <= document.documentElement.clientWidth;
  const out = [element, ...element.querySelectorAll("*")].filter((el) => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && (r.left < box.left - 0.5 || r.right > box.right + 0.5);
  }).map((el) => `${el.tagName.toLowerCase()}.${el.className} "${el.textContent.trim().slice(0, 30)}"`);
  return inside ? out : ["the card itself", ...out];
}"""


def test_no_card_overflows_at_1400_and_1024_px(signed_in, live_server, web_user) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunStatus

    run = make_run(web_user, RunStatus.SUCCEEDED)
    add_samples(run, 1, range(1), tokens=120)  # a long token strip
    add_samples(run, 2, range(1), trajectory=True, tokens=120)
    page = signed_in
    page.goto(f"{live_server.url}/projects/{web_user.project.pk}/experiments/new/")
    expect(page.locator("#check-state")).to_have_text("valid")
    expect(page.locator('#memory-table tr[data-role="actor_train"]')).to_contain_text("fits")
    inspector = page.context.new_page()
    inspector.goto(f"{live_server.url}/runs/{run.pk}/rollouts/?latest=0")
    expect(inspector.locator("section.group")).to_have_count(2)
    for summary in inspector.locator(".trajectory-tokens summary").all():
        summary.click()
    for width in (1400, 1024):
        for p in (page, inspector):
            p.set_viewport_size({"width": width, "height": 900})
        for name in ("memory-table", "derived"):
            element = page.locator(f"#{name}")
            assert element.bounding_box()["width"] > 0
            assert element.evaluate(OVERFLOW) == [], f"#{name} at {width} px"
        strips = inspector.locator(".tokens")
        expect(strips.locator("span")).to_have_count(4 * 120)  # two samples at each of two steps, all shown
        for strip in strips.all():
            assert strip.evaluate(OVERFLOW) == [], f"a token strip at {width} px"
