// Rollout inspector: samples filtered and sorted by the server, with the whole view (filters, sort, page,
// colouring, the prompt whose history is open) in the URL, so a view can be shared and survives a reload. A step scrubber walks the steps
// that have samples inside the step range applied (`step` in the URL: the one it shows). GRPO groups side by
// side when sorted by step; agentic trajectories as a conversation, turn by turn, with their tokens (those
// the loss does not train greyed) and rendered frames. Following the latest step asks again every few
// seconds until the run is finished; a redraw keeps the samples already shown as they are (sections opened,
// frames loaded) and the scroll position. Following pauses, on the step being read, as soon as the user opens a
// section or scrolls (the next step would take what they read away), and says so with a control that resumes
// it; unticking "follow" keeps the step being read too.
import { errorText, escapeHtml, getJson, numberHtml } from "./live.js";
import { HISTORY_PARAMS, openHistory, showHistory } from "./prompt_history.js";
import { tokensHtml } from "./tokens.js";

const form = document.getElementById("filters");
const api = form.dataset.api;
const FILTERS = ["step_min", "step_max", "reward_min", "reward_max", "len_min", "len_max", "stop_reason", "env_tag",
  "success", "turns_min", "turns_max", "q", "sort"];
const PAGE_SIZE = 50;
const scrubber = document.getElementById("step-scrubber");
let steps = [];
let exactStep = null; // the step the scrubber shows, inside the range (null: the whole range, or the latest)
let lastPage = 1;
let scrubTimer = null;
let loading = 0;
let shownAnswer = ""; // the URL and answer on screen: the same again draws nothing
let runFinished = false;
let shownStep = null; // the step of the samples on screen (following: the latest)
let paused = null; // why following the latest step is paused (the user opened a section, scrolled), or null

// --- the view <-> the URL ------------------------------------------------------------------------------

function viewFromUrl() {
  const params = new URLSearchParams(window.location.search);
  for (const name of FILTERS) form.elements[name].value = params.get(name) ?? (name === "sort" ? "step" : "");
  form.elements.colour.value = params.get("colour") || "logprob";
  exactStep = params.has("step") ? Number(params.get("step")) : null;
  paused = null;
  form.elements.latest.checked = params.get("latest") !== "0" && !params.has("step_min") && !params.has("step_max")
    && exactStep === null;
  return Math.max(1, Number(params.get("page")) || 1);
}

function viewParams(page) {
  const params = new URLSearchParams();
  for (const name of FILTERS) {
    const value = form.elements[name].value.trim();
    if (value && !(name === "sort" && value === "step")) params.set(name, value);
  }
  if (form.elements.colour.value !== "logprob") params.set("colour", form.elements.colour.value);
  if (!form.elements.latest.checked) params.set("latest", "0");
  if (exactStep !== null) params.set("step", String(exactStep));
  if (page > 1) params.set("page", String(page));
  const current = new URLSearchParams(window.location.search); // the prompt history panel's own state stays
  for (const name of [...HISTORY_PARAMS, "flagged"]) if (current.has(name)) params.set(name, current.get(name));
  return params;
}

// The steps with samples inside the step range the URL applies: what the scrubber walks.
function rangeSteps() {
  const view = new URLSearchParams(window.location.search);
  const lo = view.get("step_min") ? Number(view.get("step_min")) : -Infinity;
  const hi = view.get("step_max") ? Number(view.get("step_max")) : Infinity;
  return steps.filter((s) => s >= lo && s <= hi);
}

function currentPage() {
  return Math.max(1, Number(new URLSearchParams(window.location.search).get("page")) || 1);
}

// --- following the latest step, and pausing it while the user reads -------------------------------------

function following() {
  const view = new URLSearchParams(window.location.search);
  return form.elements.latest.checked && paused === null && exactStep === null && !view.has("step_min")
    && !view.has("step_max");
}

// The view stays on the step on screen (`step` in the URL) until the user resumes; the page still asks, so it
// can say how many newer steps wait.
function pauseFollowing(reason) {
  if (runFinished || shownStep === null || !following()) return;
  paused = reason;
  exactStep = shownStep;
  const params = viewParams(currentPage());
  window.history.replaceState(null, "", `${window.location.pathname}?${params}`);
  showPaused();
}

function showPaused() {
  const box = document.getElementById("follow-paused");
  box.hidden = paused === null;
  if (paused === null) return;
  const newer = steps.filter((s) => s > exactStep).length;
  document.getElementById("follow-paused-text").textContent = `Following the latest step is paused at step ${exactStep}`
    + ` while you read it (${paused})${newer ? ` · ${newer} newer step${newer === 1 ? "" : "s"}` : ""}.`;
}

function resumeFollowing() {
  paused = null;
  exactStep = null;
  form.elements.latest.checked = true;
  showPaused();
  go(1, { replace: true });
}

function go(page, { replace = false } = {}) {
  const params = viewParams(page);
  const url = `${window.location.pathname}${params.size ? `?${params}` : ""}`;
  if (url !== `${window.location.pathname}${window.location.search}`) {
    window.history[replace ? "replaceState" : "pushState"](null, "", url);
  }
  return load();
}

// --- rendering -------------------------------------------------------------------------------------------

function stopHtml(s) {
  return `<span class="stop" title="${escapeHtml(s.stop_reason || "")}">${escapeHtml(s.stop_reason_text)}</span>`;
}

function turnHtml(turn) {
  const words = [`${turn.tokens} token${turn.tokens === 1 ? "" : "s"}`];
  if (turn.role === "assistant") {
    if (turn.reward !== undefined) words.push(`reward ${numberHtml(turn.reward)}`);
    if (turn.penalty) words.push(`penalty ${numberHtml(turn.penalty)}`);
    if (turn.format_ok !== undefined) words.push(turn.format_ok ? "format ok" : "format broken");
    words.push(`action ${turn.action === null || turn.action === undefined ? "—" : `<code>${escapeHtml(turn.action)}</code>`}`);
    if (turn.stop_reason) words.push(`<span title="${escapeHtml(turn.stop_reason)}">${escapeHtml(turn.stop_reason_text || turn.stop_reason)}</span>`);
  } else {
    words.push(turn.loss ? "trained" : "not trained");
  }
  return `<li class="turn turn-${escapeHtml(turn.role)}${turn.loss ? "" : " untrained"}">
    <div class="turn-head"><b>${turn.role === "assistant" ? "policy" : turn.role === "tool" ? "tool results" : "environment"}</b> <span class="meta">${words.join(" · ")}</span></div>
    <div class="turn-text">${escapeHtml(turn.text)}</div></li>`;
}

function trajectoryHtml(s, mode) {
  const frames = s.frames_url
    ? `<details class="frames" data-url="${escapeHtml(s.frames_url)}"><summary>Rendered frames</summary><pre></pre></details>`
    : "";
  return `<ol class="turns">${s.turns.map(turnHtml).join("")}</ol>
    <details class="trajectory-tokens"><summary>Tokens (greyed: not trained)</summary>${tokensHtml(s, mode)}</details>${frames}`;
}

function historyButton(s) {
  return `<button type="button" class="link history-open" data-prompt="${escapeHtml(s.prompt_hash)}">history of this prompt</button>`;
}

function sampleHtml(s, mode, withStep) {
  const agentic = s.env_tag
    ? ` · <span class="env-tag">${escapeHtml(s.env_tag)}</span> · ${s.num_turns ?? "?"} turn${s.num_turns === 1 ? "" : "s"} ·
      <b class="${s.success ? "ok" : "bad"}">${s.success ? "solved" : "not solved"}</b>`
    : "";
  const where = withStep ? `step ${s.step} · group ${s.group_id} · ` : "";
  return `<div class="rollout sample${s.turns ? " trajectory" : ""}" data-id="${s.id}" data-key="${s.id} ${mode} ${withStep}" data-reward="${s.reward ?? ""}"
    data-sample="${s.step}.${s.group_id}.${s.sample_index}">
    <div class="meta">${where}#${s.sample_index} · reward <b>${numberHtml(s.reward)}</b> · advantage <b>${numberHtml(s.advantage)}</b> ·
      ${s.response_length} tokens · ${stopHtml(s)}${agentic}</div>
    ${s.turns ? trajectoryHtml(s, mode) : tokensHtml(s, mode)}</div>`;
}

function render(data, page) {
  const mode = form.elements.colour.value;
  const sort = form.elements.sort.value;
  const box = document.getElementById("groups");
  let html;
  if (sort === "step" || sort === "-step") {
    const groups = new Map();
    for (const s of data.results) {
      const key = `${s.step}/${s.group_id}`;
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(s);
    }
    html = [...groups.values()]
      .map((samples) => {
        const rewards = samples.map((s) => s.reward).filter((r) => r !== null);
        const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
        return `<section class="card group" data-step="${samples[0].step}" data-group="${samples[0].group_id}">
          <h3>step ${samples[0].step} · group ${samples[0].group_id} <span class="meta">mean reward ${numberHtml(mean)}</span>
            ${historyButton(samples[0])}</h3>
          <div class="prompt">${escapeHtml(samples[0].prompt)}</div>
          <div class="group-samples">${samples.map((s) => sampleHtml(s, mode, false)).join("")}</div></section>`;
      })
      .join("");
  } else {
    html = `<section class="card flat">${data.results.map((s) => `<div class="prompt">${escapeHtml(s.prompt)}</div>${historyButton(s)}${sampleHtml(s, mode, true)}`).join("")}</section>`;
  }
  // A sample already on screen, drawn the same way, stays the same node: what the user opened stays open (and
  // a sample drawn anew, e.g. in other colours, opens what was open).
  const fresh = document.createElement("template");
  fresh.innerHTML = html;
  const shown = new Map([...box.querySelectorAll(".sample")].map((el) => [el.dataset.key, el]));
  const opened = new Set([...box.querySelectorAll(".sample details[open]")].map((d) => `${d.closest(".sample").dataset.id} ${d.className}`));
  for (const el of fresh.content.querySelectorAll(".sample")) {
    const kept = shown.get(el.dataset.key);
    if (kept) el.replaceWith(kept);
    else el.querySelectorAll("details").forEach((d) => { d.open = opened.has(`${el.dataset.id} ${d.className}`); });
  }
  const { scrollX, scrollY } = window;
  box.replaceChildren(fresh.content);
  window.scrollTo(scrollX, scrollY);
  markFlagged();
  lastPage = Math.max(1, Math.ceil(data.count / PAGE_SIZE));
  document.getElementById("page-label").textContent = `page ${page} of ${lastPage}`;
  summarise(data);
}

// The samples a health alert flagged (the run page's alert link: `flagged` = step.group.index, …): outlined, and the
// first scrolled into view once, when the page opens.
let flaggedScrolled = false;
function markFlagged() {
  const flagged = new Set((new URLSearchParams(window.location.search).get("flagged") || "").split(",").filter(Boolean));
  const marked = [...document.querySelectorAll("#groups .sample")].filter((el) => {
    el.classList.toggle("flagged", flagged.has(el.dataset.sample));
    return flagged.has(el.dataset.sample);
  });
  let note = document.getElementById("flagged-note");
  if (!note) {
    note = Object.assign(document.createElement("p"), { id: "flagged-note", className: "meta flagged-note" });
    document.getElementById("groups").before(note);
  }
  note.hidden = !flagged.size;
  note.textContent = flagged.size ? `The health alert flagged ${flagged.size} sample${flagged.size === 1 ? "" : "s"}: `
    + `${marked.length} on this page, outlined.` : "";
  if (marked.length && !flaggedScrolled) {
    flaggedScrolled = true;
    marked[0].scrollIntoView({ block: "center" });
  }
}

function summarise(data) {
  const latest = form.elements.latest.checked && paused === null && exactStep === null && !form.elements.step_min.value
    && !form.elements.step_max.value;
  const lo = form.elements.step_min.value;
  const hi = form.elements.step_max.value;
  const shownStep = data.results[0]?.step;
  let where;
  if (latest) where = shownStep === undefined ? "at the latest step" : `at step ${shownStep}, the latest`;
  else if (exactStep !== null) {
    where = `at step ${exactStep}${lo || hi ? ` (of steps ${lo || "first"}–${hi || "last"})` : ""}${paused ? " (following paused)" : ""}`;
  }
  else if (lo && lo === hi) where = `at step ${lo}`;
  else if (lo || hi) where = `in steps ${lo || "first"}–${hi || "last"}`;
  else where = "in all steps";
  const run = steps.length ? ` · the run has samples at ${steps.length} step${steps.length === 1 ? "" : "s"} (${steps[0]}–${steps[steps.length - 1]})` : "";
  document.getElementById("rollout-summary").textContent = `${data.count} sample${data.count === 1 ? "" : "s"} match ${where}${run}`;
}

// The choices of a select as the run has them now (the page may have been rendered before they existed).
function fillChoices(select, values, words = {}) {
  const have = new Set([...select.options].map((o) => o.value));
  for (const value of values) {
    if (have.has(value)) continue;
    const option = document.createElement("option");
    option.value = value;
    option.textContent = words[value] ?? value;
    select.append(option);
  }
}

function showChoices(data) {
  fillChoices(form.elements.env_tag, data.env_tags);
  fillChoices(form.elements.stop_reason, data.stop_reasons, data.stop_reason_texts);
  form.querySelector(".agentic-filters").hidden = !data.env_tags.length;
  const wanted = new URLSearchParams(window.location.search);
  for (const name of ["env_tag", "stop_reason"]) {
    if (wanted.has(name)) form.elements[name].value = wanted.get(name);
  }
}

function showSteps(data) {
  steps = data.steps;
  const inRange = rangeSteps();
  scrubber.max = String(Math.max(0, inRange.length - 1));
  scrubber.disabled = inRange.length < 2;
  const at = exactStep ?? (form.elements.latest.checked ? inRange.at(-1) : null);
  const index = inRange.indexOf(at);
  scrubber.value = String(index >= 0 ? index : inRange.length - 1);
  showStepLabel(index >= 0 ? index : null, inRange);
}

function showStepLabel(index, inRange) {
  const view = new URLSearchParams(window.location.search);
  const range = view.get("step_min") || view.get("step_max")
    ? ` in steps ${view.get("step_min") || "first"}–${view.get("step_max") || "last"}` : "";
  const count = `${inRange.length} step${inRange.length === 1 ? "" : "s"} with samples${range}`;
  let text = `${count}: ◀ ▶ show them one by one`;
  if (!steps.length) text = "no samples yet";
  else if (!inRange.length) text = `no samples${range}`;
  else if (index !== null) text = `step ${inRange[index]} (${index + 1} of ${count})`;
  document.getElementById("step-label").textContent = text;
}

function showError(message) {
  shownAnswer = "";
  document.getElementById("rollout-error").textContent = message;
  document.getElementById("groups").innerHTML = ""; // never leave the previous results under an error
  document.getElementById("rollout-summary").textContent = "";
  document.getElementById("page-label").textContent = "";
}

// The request follows the URL (the view's one source), not the form: a select may still lack an option.
async function load() {
  const mine = ++loading;
  const page = currentPage();
  const view = new URLSearchParams(window.location.search);
  const params = new URLSearchParams();
  for (const name of FILTERS) if (view.get(name)) params.set(name, view.get(name));
  if (view.has("step")) {
    params.set("step_min", view.get("step"));
    params.set("step_max", view.get("step"));
  } else if (view.get("latest") !== "0" && !view.has("step_min") && !view.has("step_max")) {
    params.set("latest", "true");
  }
  params.set("page", String(page));
  params.set("page_size", String(PAGE_SIZE));
  const answer = await getJson(`${api}?${params}`);
  if (mine !== loading) return; // a newer request is on its way
  if (!answer.ok) {
    showError(answer.status === 404 && !answer.data.errors ? `page ${page} is past the last one` : errorText(answer));
    return;
  }
  runFinished = answer.data.run_finished === true;
  shownStep = exactStep ?? answer.data.results[0]?.step ?? null;
  const seen = JSON.stringify([window.location.search, answer.data]);
  if (seen === shownAnswer) return; // nothing new: the page stays exactly as the user left it
  shownAnswer = seen;
  document.getElementById("rollout-error").textContent = "";
  showChoices(answer.data);
  showSteps(answer.data);
  showPaused();
  render(answer.data, page);
}

// --- events ----------------------------------------------------------------------------------------------

form.addEventListener("submit", (event) => {
  event.preventDefault();
  exactStep = null; // the filters applied anew: the scrubber starts over on the whole range
  paused = null;
  showPaused();
  go(1);
});
form.elements.colour.addEventListener("change", () => go(currentPage(), { replace: true }));
form.elements.sort.addEventListener("change", () => go(1));
form.elements.latest.addEventListener("change", () => {
  if (form.elements.latest.checked) {
    form.elements.step_min.value = "";
    form.elements.step_max.value = "";
    exactStep = null;
  } else {
    exactStep ??= shownStep; // unticked: the step being read stays, not the whole step range
  }
  paused = null;
  showPaused();
  go(exactStep === null ? 1 : currentPage());
});
document.getElementById("resume-follow").addEventListener("click", resumeFollowing);
document.getElementById("prev").addEventListener("click", () => { if (currentPage() > 1) go(currentPage() - 1); });
document.getElementById("next").addEventListener("click", () => { if (currentPage() < lastPage) go(currentPage() + 1); });

// One step of the range applied (the range itself stays in the filters and the URL).
function scrubTo(index) {
  const inRange = rangeSteps();
  const at = Math.max(0, Math.min(inRange.length - 1, index));
  if (inRange[at] === undefined) return;
  exactStep = inRange[at];
  scrubber.value = String(at);
  form.elements.latest.checked = false;
  paused = null;
  showPaused();
  showStepLabel(at, inRange);
  clearTimeout(scrubTimer);
  scrubTimer = setTimeout(() => go(1, { replace: true }), 150);
}
scrubber.addEventListener("input", () => scrubTo(Number(scrubber.value)));
document.getElementById("step-prev").addEventListener("click", () => scrubTo(Number(scrubber.value) - 1));
document.getElementById("step-next").addEventListener("click", () => scrubTo(Number(scrubber.value) + 1));

document.getElementById("groups").addEventListener("click", (event) => {
  const button = event.target.closest?.("button.history-open");
  if (button) openHistory(button.dataset.prompt);
  const summary = event.target.closest?.("summary");
  if (summary && !summary.parentElement.open) pauseFollowing("you opened a section");
});

// The user's own scrolling (wheel, touch, keys, the scroll bar dragged), never the page's: a redraw puts the
// scroll position back, which must not pause anything.
const SCROLL_KEYS = new Set(["ArrowDown", "ArrowUp", "PageDown", "PageUp", "Home", "End", " "]);
let pointerDown = false;
function userScrolled() {
  setTimeout(() => { if (window.scrollY > 0) pauseFollowing("you scrolled"); }, 150);
}
window.addEventListener("wheel", userScrolled, { passive: true });
window.addEventListener("touchmove", userScrolled, { passive: true });
window.addEventListener("keydown", (event) => {
  if (SCROLL_KEYS.has(event.key) && !event.target.closest?.("input, select, textarea, button, summary")) userScrolled();
});
document.addEventListener("mousedown", () => { pointerDown = true; });
document.addEventListener("mouseup", () => { pointerDown = false; });
window.addEventListener("scroll", () => { if (pointerDown) userScrolled(); }, { passive: true });

document.getElementById("groups").addEventListener("toggle", async (event) => {
  const details = event.target;
  if (!details.matches?.("details.frames") || !details.open || details.dataset.loaded) return;
  const response = await fetch(details.dataset.url, { credentials: "same-origin" });
  details.querySelector("pre").textContent = response.ok ? await response.text() : `frames not available (${response.status})`;
  details.dataset.loaded = "1";
}, true);

window.addEventListener("popstate", () => {
  viewFromUrl();
  load();
  showHistory();
});

viewFromUrl();
load();
showHistory();
// Following the latest step of a run still going: ask again (paused too: the newer steps are counted); a finished
// run has nothing new to show.
setInterval(() => { if (!runFinished && form.elements.latest.checked && currentPage() === 1) load(); }, 3000);
