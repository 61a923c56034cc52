// The rollout inspector's "history of this prompt" panel: one prompt's responses at every step that logged it,
// steps as rows, this run and a compared run as columns, each response with its reward, length, stop reason
// and trainer-engine log-prob mismatch; a response's tokens open on demand, coloured by that mismatch. Its
// state is in the page's URL (`prompt`: the prompt's hash, `compare`: a run id, `hpage`: the page of steps),
// beside the inspector's own, so a history can be shared and survives a reload.
import { errorText, escapeHtml, getJson, numberHtml } from "./live.js";
import { MISMATCH_FULL, tokensHtml } from "./tokens.js";

export const HISTORY_PARAMS = ["prompt", "compare", "hpage"];
const STEPS_PER_PAGE = 10;
const panel = document.getElementById("prompt-history");
const compareSelect = document.getElementById("history-compare");
let loading = 0;
let lastPage = 1;

function historyState() {
  const params = new URLSearchParams(window.location.search);
  return { prompt: params.get("prompt"), compare: params.get("compare") || "",
    page: Math.max(1, Number(params.get("hpage")) || 1) };
}

// A new history state in the URL (null removes a parameter); the inspector's own parameters stay.
function setHistory(changes) {
  const params = new URLSearchParams(window.location.search);
  for (const [name, value] of Object.entries(changes)) {
    if (value === null || value === "") params.delete(name);
    else params.set(name, String(value));
  }
  window.history.pushState(null, "", `${window.location.pathname}${params.size ? `?${params}` : ""}`);
  return showHistory();
}

export function openHistory(promptHash) {
  setHistory({ prompt: promptHash, hpage: null }).then(() => panel.scrollIntoView({ block: "start" }));
}

function runHead(run, index) {
  const role = index === 0 ? "this run" : "compared";
  return `<th class="history-run" data-run="${run.id}"><a href="${escapeHtml(run.inspector_url)}">run ${run.id}</a>
    · ${escapeHtml(run.name)} <span class="meta">(${role}: ${run.steps} step${run.steps === 1 ? "" : "s"},
    ${run.samples} sample${run.samples === 1 ? "" : "s"})</span></th>`;
}

function mismatchHtml(s) {
  if (s.logprob_mismatch_max === null || s.logprob_mismatch_max === undefined) {
    return `<span class="meta" title="the sample carries no trainer log-probs">no trainer log-probs</span>`;
  }
  const high = s.logprob_mismatch_max >= MISMATCH_FULL ? " high" : "";
  return `<span class="mismatch${high}">|Δ log-prob| mean ${numberHtml(s.logprob_mismatch_mean)} · max ${numberHtml(s.logprob_mismatch_max)}</span>`;
}

function sampleHtml(s) {
  return `<div class="history-sample" data-id="${s.id}">
    <div class="meta">#${s.sample_index} (group ${s.group_id}) · reward <b>${numberHtml(s.reward)}</b> ·
      ${s.response_length} tokens · <span class="stop" title="${escapeHtml(s.stop_reason)}">${escapeHtml(s.stop_reason_text)}</span>
      · ${mismatchHtml(s)}</div>
    <div class="response">${escapeHtml(s.response)}</div>
    <details class="history-tokens" data-url="${escapeHtml(s.url)}"><summary>tokens: trainer vs engine</summary>
      <div class="token-view meta">loading…</div></details></div>`;
}

function cellHtml(cell, run, step) {
  if (!cell.count) return `<td class="history-cell empty"><span class="meta">not logged at this step</span></td>`;
  const rewards = cell.samples.map((s) => s.reward).filter((r) => r !== null);
  const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
  const more = cell.count - cell.samples.length;
  const rest = more > 0
    ? `<a class="meta" href="${escapeHtml(run.inspector_url)}?latest=0&step=${step}">${more} more at this step in the inspector</a>` : "";
  return `<td class="history-cell" data-run="${run.id}"><div class="meta">${cell.count} response${cell.count === 1 ? "" : "s"}
    · mean reward ${numberHtml(mean)}</div>${cell.samples.map(sampleHtml).join("")}${rest}</td>`;
}

function render(data, page) {
  document.getElementById("history-prompt").textContent = data.prompt;
  panel.querySelector("thead").innerHTML = `<tr><th>step</th>${data.runs.map(runHead).join("")}</tr>`;
  const byId = new Map(data.runs.map((r) => [r.id, r]));
  panel.querySelector("tbody").innerHTML = data.results
    .map((row) => `<tr data-step="${row.step}"><th>${row.step}</th>${row.cells.map((c) => cellHtml(c, byId.get(c.run), row.step)).join("")}</tr>`)
    .join("");
  lastPage = Math.max(1, Math.ceil(data.count / STEPS_PER_PAGE));
  document.getElementById("history-page").textContent = `steps page ${page} of ${lastPage}`;
  document.getElementById("history-prev").disabled = page <= 1;
  document.getElementById("history-next").disabled = page >= lastPage;
  document.getElementById("history-summary").textContent =
    `logged at ${data.count} step${data.count === 1 ? "" : "s"} by ${data.runs.length === 1 ? "this run" : "either run"}`;
}

function clear(message) {
  document.getElementById("history-error").textContent = message;
  for (const part of ["thead", "tbody"]) panel.querySelector(part).innerHTML = "";
  document.getElementById("history-summary").textContent = "";
  document.getElementById("history-page").textContent = "";
}

// The panel as the URL says: hidden without `prompt`, else the page of steps it names.
export async function showHistory() {
  const mine = ++loading;
  const { prompt, compare, page } = historyState();
  panel.hidden = !prompt;
  if (!prompt) return;
  if (compare && ![...compareSelect.options].some((o) => o.value === compare)) {
    compareSelect.append(new Option(`run ${compare}`, compare)); // a run older than the list: still choosable
  }
  compareSelect.value = compare;
  const params = new URLSearchParams({ prompt, page: String(page), page_size: String(STEPS_PER_PAGE) });
  if (compare) params.set("compare", compare);
  const answer = await getJson(`${panel.dataset.api}?${params}`);
  if (mine !== loading) return; // a newer request is on its way
  if (!answer.ok) {
    clear(errorText(answer));
    return;
  }
  document.getElementById("history-error").textContent = "";
  render(answer.data, page);
}

compareSelect.addEventListener("change", () => setHistory({ compare: compareSelect.value, hpage: null }));
document.getElementById("history-close").addEventListener("click", () => setHistory({ prompt: null, compare: null, hpage: null }));
document.getElementById("history-prev").addEventListener("click", () => {
  const { page } = historyState();
  if (page > 1) setHistory({ hpage: page - 1 });
});
document.getElementById("history-next").addEventListener("click", () => {
  const { page } = historyState();
  if (page < lastPage) setHistory({ hpage: page + 1 });
});

// A response's tokens, asked for when first opened, coloured by |trainer - engine|.
panel.addEventListener("toggle", async (event) => {
  const details = event.target;
  if (!details.matches?.("details.history-tokens") || !details.open || details.dataset.loaded) return;
  details.dataset.loaded = "1";
  const view = details.querySelector(".token-view");
  const answer = await getJson(details.dataset.url);
  if (!answer.ok) {
    view.textContent = `tokens not available (${errorText(answer)})`;
    return;
  }
  const s = answer.data;
  view.classList.remove("meta");
  const note = Array.isArray(s.token_logprobs_trainer) ? ""
    : `<p class="meta">The trainer's log-probs were not logged for this sample (a run with use_rollout_log_probs, or one
      from before they were): tokens are shown without colour.</p>`;
  view.innerHTML = `${note}${tokensHtml(s, "mismatch")}`;
}, true);
