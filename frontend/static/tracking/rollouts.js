// Rollout inspector: filtered, paged samples; GRPO groups side by side with rewards and advantages;
// tokens coloured by log-prob or advantage when the trainer sent token arrays.
import { escapeHtml } from "./live.js";

const form = document.getElementById("filters");
const api = form.dataset.api;
let page = 1;
let lastPage = 1;

function colour(value, mode) {
  if (value === null || value === undefined) return "transparent";
  if (mode === "logprob") {
    const p = Math.exp(Math.min(0, value)); // probability: green when likely, red when unlikely
    return `hsla(${Math.round(120 * p)}, 75%, 55%, 0.35)`;
  }
  const a = Math.max(-1, Math.min(1, value));
  return a >= 0 ? `rgba(46, 125, 50, ${0.15 + 0.5 * a})` : `rgba(198, 40, 40, ${0.15 - 0.5 * a})`;
}

function tokensHtml(s, mode) {
  if (!Array.isArray(s.tokens) || !s.tokens.length) return `<div class="response">${escapeHtml(s.response)}</div>`;
  const values = mode === "logprob" ? s.token_logprobs : s.token_advantages;
  return `<div class="response tokens">${s.tokens
    .map((t, i) => `<span title="${mode} ${values?.[i] ?? "—"}" style="background:${colour(values?.[i], mode)}">${escapeHtml(t)}</span>`)
    .join("")}</div>`;
}

function render(data) {
  const mode = form.elements.colour.value;
  const groups = new Map();
  for (const s of data.results) {
    const key = `${s.step}/${s.group_id}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(s);
  }
  document.getElementById("groups").innerHTML = [...groups.values()]
    .map((samples) => {
      const rewards = samples.map((s) => s.reward).filter((r) => r !== null);
      const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
      return `<section class="card group" data-step="${samples[0].step}" data-group="${samples[0].group_id}">
        <h3>step ${samples[0].step} · group ${samples[0].group_id} <span class="meta">mean reward ${mean === null ? "—" : mean.toFixed(3)}</span></h3>
        <div class="prompt">${escapeHtml(samples[0].prompt)}</div>
        <div class="group-samples">${samples
          .map(
            (s) => `<div class="rollout sample" data-id="${s.id}"><div class="meta">#${s.sample_index} · reward <b>${s.reward ?? "—"}</b> ·
            advantage <b>${s.advantage === null ? "—" : Number(s.advantage).toFixed(3)}</b> · ${s.response_length} tok · ${escapeHtml(s.stop_reason)}</div>${tokensHtml(s, mode)}</div>`,
          )
          .join("")}</div></section>`;
    })
    .join("");
  lastPage = Math.max(1, Math.ceil(data.count / 50));
  document.getElementById("page-label").textContent = `page ${page} of ${lastPage}`;
  document.getElementById("rollout-summary").textContent = `${data.count} samples · steps ${data.steps.length ? `${data.steps[0]}–${data.steps[data.steps.length - 1]}` : "—"}`;
}

async function load() {
  const params = new URLSearchParams();
  for (const name of ["step_min", "step_max", "reward_min", "reward_max", "len_min", "len_max", "stop_reason", "q"]) {
    const value = form.elements[name].value.trim();
    if (value) params.set(name, value);
  }
  params.set("page", String(page));
  let response = await fetch(`${api}?${params}`, { credentials: "same-origin", headers: { Accept: "application/json" } });
  let data = await response.json();
  const error = document.getElementById("rollout-error");
  if (!response.ok) {
    error.textContent = (data.errors || []).map((e) => `${e.field}: ${e.message}`).join("; ") || `error ${response.status}`;
    return;
  }
  error.textContent = "";
  // "Follow the latest step": without an explicit step range, show the newest step's samples.
  if (form.elements.latest.checked && !params.has("step_min") && !params.has("step_max") && data.steps.length) {
    const latest = data.steps[data.steps.length - 1];
    params.set("step_min", String(latest));
    params.set("step_max", String(latest));
    response = await fetch(`${api}?${params}`, { credentials: "same-origin", headers: { Accept: "application/json" } });
    data = await response.json();
  }
  render(data);
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  page = 1;
  load();
});
form.elements.colour.addEventListener("change", load);
document.getElementById("prev").addEventListener("click", () => { if (page > 1) { page -= 1; load(); } });
document.getElementById("next").addEventListener("click", () => { if (page < lastPage) { page += 1; load(); } });
load();
setInterval(() => { if (form.elements.latest.checked && page === 1) load(); }, 3000);
