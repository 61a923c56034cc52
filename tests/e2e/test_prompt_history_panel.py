"""The rollout inspector's prompt history in a real Chromium against the real web stack (daphne + ingest), the
samples sent by the trainer's own EventEmitter: one prompt's responses at every step of this run and of a compared
run side by side, the history in the URL, and a response's tokens coloured by |trainer - engine| log-prob."""

from __future__ import annotations

import re

import pytest

from tests.e2e.test_dashboards import make_run, shot
from tests.platform.web_stack import emitter_for, ingested, sign_in

pytestmark = pytest.mark.e2e
PROMPT = "Q: what is 17 + 25? Answer with a number."
TOKENS = ["The", " answer", " is", " 42", "<img src=x onerror=alert(1)>"]
ENGINE = [-0.05, -0.2, -0.1, -0.9, -3.0]


def samples(step: int, *, drift: float) -> list[dict]:
    """Two responses to PROMPT and one to another prompt; the trainer's log-probs drift from the engine's on
    the answer token by `drift`."""
    def one(index: int, reward: float) -> dict:
        trainer = [*ENGINE[:3], ENGINE[3] - drift, ENGINE[4]]
        return {"prompt": PROMPT, "response": "".join(TOKENS[: 3 + index * 2]), "reward": reward, "advantage": 0.0,
                "prompt_length": 12, "response_length": 3 + index * 2, "stop_reason": "eos", "group_id": 0,
                "sample_index": index, "tokens": TOKENS[: 3 + index * 2], "token_logprobs": ENGINE[: 3 + index * 2],
                "token_logprobs_trainer": trainer[: 3 + index * 2]}

    other = {**one(0, 0.0), "prompt": "Q: what is 2 + 2?", "group_id": 1}
    return [one(0, 0.0), one(1, 1.0 if step > 1 else 0.0), other]


def test_a_prompts_history_beside_a_compared_run_with_trainer_engine_mismatch(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    run, other = make_run(web_user, "grpo baseline"), make_run(web_user, "grpo bf16 engine")
    for target, steps, drift in ((run, (1, 2, 3), 0.0), (other, (2, 3, 4), 0.6)):
        emitter = emitter_for(target, tracking_stack)
        for step in steps:
            emitter.rollouts(samples(step, drift=drift), step)
        ingested(target, emitter.seq)
        emitter.close()
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/rollouts/")
    expect(page.locator("#prompt-history")).to_be_hidden()

    page.locator(".group", has_text=PROMPT).locator("button.history-open").click()
    expect(page).to_have_url(re.compile(r"[?&]prompt=[0-9a-f]{32}"))
    history = page.locator("#prompt-history")
    expect(history.locator("#history-prompt")).to_have_text(PROMPT)
    expect(history.locator("tbody tr")).to_have_count(3)  # steps 1-3 of this run

    page.select_option("#history-compare", str(other.pk))
    expect(page).to_have_url(re.compile(rf"[?&]compare={other.pk}(&|$)"))
    expect(history.locator("tbody tr")).to_have_count(4)  # steps 1-4: either run
    expect(history.locator("thead")).to_contain_text("grpo bf16 engine")
    expect(history.locator('tr[data-step="1"] td').nth(1)).to_have_text("not logged at this step")
    expect(history.locator('tr[data-step="4"] td').nth(0)).to_have_text("not logged at this step")
    compared = history.locator(f'tr[data-step="3"] td[data-run="{other.pk}"] .history-sample').nth(1)
    expect(compared.locator(".mismatch")).to_contain_text("max 0.6")
    expect(compared.locator(".response")).to_contain_text("<img src=x onerror=alert(1)>")  # text, not markup

    page.reload()  # the history lives in the URL
    expect(page.locator("#history-compare")).to_have_value(str(other.pk))
    compared.locator(".history-tokens summary").click()
    answer = compared.locator(".tokens span").nth(3)
    expect(answer).to_have_text(" 42")
    expect(answer).to_have_attribute("title", "trainer -1.5 · engine -0.9 · |Δ| 0.6")
    assert "198, 40, 40" in answer.get_attribute("style")  # red where they disagree
    assert "transparent" in compared.locator(".tokens span").nth(0).get_attribute("style")
    assert history.locator("img").count() == 0
    shot(page, "inspector-prompt-history")

    history.locator("#history-close").click()
    expect(history).to_be_hidden()
    assert "prompt=" not in page.url
