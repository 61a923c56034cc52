// Run dashboard: live charts for every metric key (grouped by prefix), system charts, status and
// ETA, log tail, latest rollouts, checkpoints with Resume and Fork.
import { ChartBoard, SeriesStore, bindControls } from "./charts.js";
import { connectRun, csrfToken, escapeHtml } from "./live.js";

const root = document.getElementById("run");
const runId = Number(root.dataset.runId);
const canWrite = root.dataset.canWrite === "1";
const metrics = new SeriesStore();
const system = new SeriesStore();
const board = new ChartBoard(document.getElementById("charts"));
board.sources = [{ label: `run ${runId}`, store: metrics }];
const systemBoard = new ChartBoard(document.getElementById("system-charts"));
systemBoard.sources = [{ label: `run ${runId}`, store: system }];
systemBoard.axis = "time";
bindControls(board);
const checkpoints = new Map(); // step -> checkpoint
const LOG_LINES = 500;
let logLines = [];
let rolloutStep = null;

function formatEta(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h ? `${h} h ${m} min` : m ? `${m} min ${s % 60} s` : `${s} s`;
}

function showStatus(run) {
  if (!run) return;
  const state = document.getElementById("run-state");
  state.textContent = run.status;
  state.className = `status status-${run.status}`;
  document.getElementById("run-step").textContent = run.step;
  document.getElementById("run-total").textContent = run.total_steps ?? "?";
  document.getElementById("run-eta").textContent = formatEta(run.eta_s);
  document.getElementById("run-message").textContent = run.message || "";
  const pct = run.total_steps ? Math.min(100, (100 * run.step) / run.total_steps) : 0;
  document.getElementById("run-progress").style.width = `${pct}%`;
}

function statusFromEvent(e) {
  return { status: e.data.status, step: e.data.step, total_steps: e.data.total_steps, eta_s: e.data.eta_s, message: e.data.message };
}

function addPoints(store, chartBoard, e) {
  for (const [key, value] of Object.entries(e.data.values || {})) {
    store.add(key, e.step, e.time, value);
    chartBoard.touch(key);
  }
  if (store === system) document.getElementById("system-empty")?.remove();
}

function formatBytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  let v = Number(n) || 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function renderCheckpoints() {
  const body = document.querySelector("#checkpoints tbody");
  const rows = [...checkpoints.values()].sort((a, b) => a.step - b.step);
  body.innerHTML = rows
    .map(
      (c) => `<tr data-step="${c.step}"><td>${c.step}</td><td>${formatBytes(c.size_bytes)}</td>
      <td>${escapeHtml((c.contents || []).join(", "))}</td><td>${c.attempt ?? ""}</td>
      <td>${canWrite && c.id ? `<button type="button" data-resume="${c.id}">Resume</button> <button type="button" data-fork="${c.id}" data-step="${c.step}">Fork</button>` : ""}</td></tr>`,
    )
    .join("");
}

function renderRollouts(samples, step) {
  if (rolloutStep !== null && step < rolloutStep) return;
  rolloutStep = step;
  document.getElementById("rollouts-step").textContent = `step ${step}`;
  const box = document.getElementById("latest-rollouts");
  box.dataset.step = String(step);
  box.innerHTML = samples
    .slice(0, 16)
    .map(
      (s) => `<div class="rollout"><div class="meta">group ${s.group_id} · #${s.sample_index} · reward <b>${s.reward ?? "—"}</b> · adv ${s.advantage === null || s.advantage === undefined ? "—" : Number(s.advantage).toFixed(3)} · ${s.response_length} tok · ${escapeHtml(s.stop_reason)}</div>
      <div class="prompt">${escapeHtml(s.prompt)}</div><div class="response">${escapeHtml(s.response)}</div></div>`,
    )
    .join("");
}

function appendLogs(lines) {
  logLines = logLines.concat(lines).slice(-LOG_LINES);
  const pre = document.getElementById("log-tail");
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
  pre.textContent = logLines.join("\n");
  if (atBottom) pre.scrollTop = pre.scrollHeight;
}

function onSeries(frame) {
  const store = frame.source === "system" ? system : metrics;
  store.load(frame.series);
  if (frame.source === "system") {
    document.getElementById("system-empty")?.remove();
    systemBoard.touchAll();
  } else {
    board.touchAll();
  }
}

function onSnapshot(snap) {
  metrics.series.clear();
  system.series.clear();
  metrics.load(snap.series);
  system.load(snap.system);
  if (Object.keys(snap.system).length) document.getElementById("system-empty")?.remove();
  board.touchAll();
  systemBoard.touchAll();
  checkpoints.clear();
  for (const c of snap.checkpoints) checkpoints.set(c.step, c);
  renderCheckpoints();
  if (snap.rollouts.length) renderRollouts(snap.rollouts, snap.rollouts[0].step);
  logLines = [];
  appendLogs(snap.logs.map((l) => l.text));
  showStatus(snap.run);
}

function onEvents(events, run) {
  let checkpointsChanged = false;
  for (const e of events) {
    if (e.type === "metrics") addPoints(metrics, board, e);
    else if (e.type === "system") addPoints(system, systemBoard, e);
    else if (e.type === "status") showStatus(statusFromEvent(e));
    else if (e.type === "rollouts") renderRollouts(e.data.samples || [], e.step);
    else if (e.type === "log") appendLogs(e.data.lines || []);
    else if (e.type === "checkpoint") {
      checkpoints.set(e.data.step, { ...e.data, attempt: e.attempt, id: e.data.id });
      checkpointsChanged = true;
    }
  }
  if (run) showStatus(run);
  if (checkpointsChanged) renderCheckpoints();
}

document.getElementById("checkpoints").addEventListener("click", async (event) => {
  const error = document.getElementById("checkpoint-error");
  error.textContent = "";
  const resume = event.target.closest("button[data-resume]");
  const fork = event.target.closest("button[data-fork]");
  if (resume) {
    const response = await fetch(root.dataset.resumeUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), Accept: "application/json" },
      body: JSON.stringify({ checkpoint: Number(resume.dataset.resume) }),
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      error.textContent = (body.errors || []).map((e) => e.message).join("; ") || `resume failed (${response.status})`;
      return;
    }
    if (body.id !== runId) {
      window.location.href = body.dashboard_url || `/runs/${body.id}/`;
      return;
    }
    showStatus({ status: body.status, step: body.current_step, total_steps: body.total_steps, eta_s: body.eta_seconds, message: body.message });
  } else if (fork) {
    const form = document.getElementById("fork-form");
    form.hidden = false;
    form.querySelector("input[name=checkpoint]").value = fork.dataset.fork;
    form.querySelector("[data-fork-step]").textContent = fork.dataset.step;
    form.querySelector("textarea").focus();
  }
});

connectRun(runId, { onSnapshot, onSeries, onEvents, onState: (s) => { document.getElementById("live-state").textContent = s; } });
window.policylab = { metrics, system, board, checkpoints };
