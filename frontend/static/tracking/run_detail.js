// Run dashboard: metric charts grouped by prefix (pinned first, the async-rollout panel, then by prefix),
// drawn as they scroll into view from the downsampling API; system charts; the run's phases, status and
// ETA; a live log tail with terminal colours; latest rollouts; checkpoints with Resume and Fork; Cancel.
// The header shows the run's state as the server sends it (snapshot, replay and `run` frames): the one
// with the highest `version` wins, so a late or replayed frame never shows an older state or step.
import { ansiToHtml } from "./ansi.js";
import { ChartBoard, SeriesStore, bindControls } from "./charts.js";
import { connectRun, errorText, escapeHtml, getJson, numberHtml, postJson } from "./live.js";

const root = document.getElementById("run");
const runId = Number(root.dataset.runId);
const canWrite = root.dataset.canWrite === "1";
const config = JSON.parse(document.getElementById("chart-config").textContent);
const metrics = new SeriesStore();
const system = new SeriesStore();
const MAX_POINTS = 1000;

async function loadSeries(keys) {
  const url = `${root.dataset.metricsUrl}?${new URLSearchParams({ keys: keys.join(","), max_points: MAX_POINTS })}`;
  const answer = await getJson(url);
  if (!answer.ok) throw new Error(errorText(answer));
  metrics.load(answer.data.series);
}

async function pin(key, pinned) {
  const answer = await postJson(root.dataset.pinsUrl, { key, pinned });
  return answer.ok ? answer.data.keys : null;
}

const board = new ChartBoard(document.getElementById("charts"), {
  pinned: config.pinned, asyncPrefix: config.async_prefix, asyncCharts: config.async_charts, onPin: pin,
  csvName: `run-${runId}`,
});
const source = { label: `run ${runId}`, store: metrics, load: loadSeries, snapshotKeys: new Set() };
board.addSource(source);
const systemBoard = new ChartBoard(document.getElementById("system-charts"), { lazy: false, csvName: `run-${runId}-system` });
systemBoard.addSource({ label: `run ${runId}`, store: system });
systemBoard.axis = "time";
systemBoard.fixedAxis = "time";
const updateCount = bindControls([board, systemBoard], ({ shown, total }) => {
  document.getElementById("chart-count").textContent = total ? `${shown} of ${total} charts` : "";
});
const checkpoints = new Map(); // step -> checkpoint
const LOG_LINES = 500;
const logKeys = new Set(); // "seq:line_no" of the lines shown (trainer events and driver output never collide)
let rolloutStep = null;
let shown = { version: -1 }; // the run state on screen
const startPhases = []; // [{message, since}] the trainer's phases while starting

function formatEta(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h ? `${h} h ${m} min` : m ? `${m} min ${s % 60} s` : `${s} s`;
}

// queued → submitting → starting → running → finished: the phases done, the current one, what is ahead;
// while starting, the trainer's own phases (loading data, placing workers, loading models, first rollout).
function showPhases(run) {
  const order = [...document.querySelectorAll("#run-phases li")].map((li) => li.dataset.phase);
  const current = run.finished ? order.length - 1 : Math.max(0, order.indexOf(run.status === "cancelling" ? "running" : run.status));
  document.querySelectorAll("#run-phases li").forEach((li, i) => {
    li.className = i < current ? "done" : i === current ? "current" : "";
    if (li.dataset.phase === "finished") li.textContent = run.finished ? run.status : "finished";
  });
  if (run.status === "starting" && run.message && startPhases.at(-1)?.message !== run.message) {
    startPhases.push({ message: run.message, since: Date.now() });
  }
  const list = document.getElementById("start-phases");
  list.hidden = !startPhases.length || run.status !== "starting";
  list.innerHTML = startPhases.map((p, i) => {
    const until = startPhases[i + 1]?.since;
    const took = until ? ` (${Math.max(1, Math.round((until - p.since) / 1000))} s)` : " …";
    return `<li class="${until ? "done" : "current"}">${escapeHtml(p.message)}${took}</li>`;
  }).join("");
}

const baseTitle = document.title.replace(`Run ${runId} (stalled) `, `Run ${runId} `); // the server renders an open stall

// A live run whose latest attempt has an open stall (the server-rendered banner) shows as stalled: in its
// status, the page title and the ETA, which means nothing while a phase does not end.
function stalledNow(run) {
  return !run.finished && Boolean(document.querySelector("#run-stalls .stall-banner"));
}

function showState(run) {
  if (!run || typeof run.version !== "number" || run.version < shown.version) return;
  const statusChanged = shown.status !== undefined && shown.status !== run.status;
  shown = run;
  const stalled = stalledNow(run);
  const status = stalled ? "stalled" : run.status;
  const state = document.getElementById("run-state");
  state.textContent = status;
  state.className = `status status-${status}`;
  state.dataset.version = String(run.version);
  document.title = stalled ? baseTitle.replace(`Run ${runId} `, `Run ${runId} (stalled) `) : baseTitle;
  document.getElementById("run-step").textContent = run.step;
  document.getElementById("run-total").textContent = run.total_steps ?? "?";
  document.getElementById("run-eta").textContent = stalled ? "— (stalled)" : formatEta(run.eta_s);
  document.getElementById("run-message").textContent = run.message || "";
  const pct = run.total_steps ? Math.min(100, (100 * run.step) / run.total_steps) : 0;
  document.getElementById("run-progress").style.width = `${pct}%`;
  const cancel = document.getElementById("cancel-run");
  if (cancel) cancel.hidden = !run.cancellable;
  showPhases(run);
  renderCheckpoints();
  if (statusChanged) refreshCheckpoints(); // what each checkpoint offers depends on the run's state
  if (statusChanged && run.finished) document.querySelector("#run-stalls .stall-banner")?.remove(); // the attempt ended
}

function chartsAppeared() {
  document.getElementById("charts-empty")?.remove();
  updateCount();
}

function addPoints(e) {
  for (const [key, value] of Object.entries(e.data.values || {})) {
    metrics.add(key, e.step, e.time, value);
    // a key the run did not have at the snapshot: every point of it arrives live, nothing to ask for
    if (!source.snapshotKeys.has(key)) board.markLoaded(source, key);
    board.touch(key);
  }
  chartsAppeared();
}

function addSystemPoints(e) {
  for (const [key, value] of Object.entries(e.data.values || {})) {
    system.add(key, e.step, e.time, value);
    systemBoard.touch(key);
  }
  document.getElementById("system-empty")?.remove();
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

function latestResumable() {
  return [...checkpoints.values()].filter((c) => c.on_disk).reduce((a, c) => (a && a.step > c.step ? a : c), null);
}

// What a checkpoint offers is the server's verdict (experiments.services.checkpoint_verdicts, also in the API's
// listing and the CLI): Resume and Fork; Fork only (with a larger max_steps) where resuming would train nothing;
// Resume greyed out, saying why, while the run is live.
function checkpointActions(c) {
  if (!canWrite || !c.id || !c.on_disk) return "";
  const fork = `<button type="button" data-fork="${c.id}" data-step="${c.step}"${c.fork_max_steps ? ` data-max-steps="${c.fork_max_steps}"` : ""}>Fork</button>`;
  if (c.resumable) return `<button type="button" data-resume="${c.id}" data-step="${c.step}">Resume</button> ${fork}`;
  if (c.fork_max_steps) return `${fork} <small class="meta checkpoint-note">${escapeHtml(c.reason)}</small>`;
  return `<button type="button" disabled title="${escapeHtml(c.reason)}">Resume</button> ${fork}`;
}

function renderCheckpoints() {
  const body = document.querySelector("#checkpoints tbody");
  const rows = [...checkpoints.values()].sort((a, b) => b.step - a.step); // newest first, as the CLI and API list them
  body.innerHTML = rows
    .map(
      (c) => `<tr data-step="${c.step}" class="${c.on_disk ? "" : "checkpoint-gone"}"><td>${c.step}</td><td>${formatBytes(c.size_bytes)}</td>
      <td>${escapeHtml((c.contents || []).join(", "))}</td><td>${c.attempt ?? ""}</td>
      <td class="checkpoint-state">${c.on_disk ? "on disk" : c.deleted ? "deleted by retention" : "gone from disk"}</td>
      <td>${checkpointActions(c)}</td></tr>`,
    )
    .join("");
}

function setCheckpoints(list) {
  checkpoints.clear();
  for (const c of list) checkpoints.set(c.step, c);
  renderCheckpoints();
}

async function refreshCheckpoints() {
  const answer = await getJson(`${root.dataset.checkpointsUrl}?page_size=1000`);
  if (answer.ok) setCheckpoints(answer.data.results);
}

function renderRollouts(samples, step) {
  if (rolloutStep !== null && step < rolloutStep) return;
  rolloutStep = step;
  document.getElementById("rollouts-step").textContent = `step ${step}`;
  const box = document.getElementById("latest-rollouts");
  box.dataset.step = String(step);
  box.innerHTML = samples
    .slice(0, 16)
    .map((s) => {
      const agentic = s.env_tag ? ` · ${escapeHtml(s.env_tag)} · ${s.num_turns ?? "?"} turns · ${s.success ? "solved" : "not solved"}` : "";
      return `<div class="rollout"><div class="meta">group ${s.group_id} · #${s.sample_index} · reward <b>${numberHtml(s.reward)}</b> ·
        advantage ${numberHtml(s.advantage)} · ${s.response_length} tokens${agentic} ·
        <span title="${escapeHtml(s.stop_reason)}">${escapeHtml(s.stop_reason_text || s.stop_reason)}</span></div>
        <div class="prompt">${escapeHtml(s.prompt)}</div><div class="response">${escapeHtml(s.response)}</div></div>`;
    })
    .join("");
}

// Log lines keyed by (seq, line_no): a trainer `log` event's lines, or the Ray driver's output (seq < 0).
function appendLogs(lines) {
  const pre = document.getElementById("log-tail");
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
  const html = [];
  for (const line of lines) {
    const key = `${line.seq}:${line.line_no}`;
    if (logKeys.has(key)) continue;
    logKeys.add(key);
    html.push(`<div class="log-line${line.level === "error" ? " log-error" : ""}" data-key="${escapeHtml(key)}">${ansiToHtml(line.text)}</div>`);
  }
  if (!html.length) return;
  pre.insertAdjacentHTML("beforeend", html.join(""));
  while (pre.children.length > LOG_LINES) {
    logKeys.delete(pre.firstElementChild.dataset.key);
    pre.firstElementChild.remove();
  }
  document.getElementById("log-count").textContent = `last ${pre.children.length} lines`;
  if (atBottom) pre.scrollTop = pre.scrollHeight;
}

function onSeries(frame) {
  if (frame.source !== "system") return; // metric series come from the API (lazy snapshot)
  system.load(frame.series);
  document.getElementById("system-empty")?.remove();
  systemBoard.addKeys(Object.keys(frame.series));
  systemBoard.touchAll();
}

function onSnapshot(snap) {
  metrics.series.clear();
  system.series.clear();
  system.load(snap.system);
  metrics.t0 = snap.metrics.length ? Math.min(...snap.metrics.map((m) => m.first_time)) : null;
  source.snapshotKeys = new Set(snap.metrics.map((m) => m.key));
  board.addKeys(source.snapshotKeys);
  board.invalidate(source);
  if (snap.metrics.length) chartsAppeared();
  if (Object.keys(snap.system).length) document.getElementById("system-empty")?.remove();
  systemBoard.addKeys(Object.keys(snap.system));
  systemBoard.touchAll();
  setCheckpoints(snap.checkpoints);
  if (snap.rollouts.length) renderRollouts(snap.rollouts, snap.rollouts[0].step);
  appendLogs(snap.logs);
  showState(snap.run);
}

function onEvents(events, run) {
  const sections = new Set(); // server-rendered sections to fetch again: once for a burst of their events
  for (const e of events) {
    if (e.type === "metrics") addPoints(e);
    else if (e.type === "system") addSystemPoints(e);
    else if (e.type === "rollouts") renderRollouts(e.data.samples || [], e.step);
    else if (e.type === "log") appendLogs((e.data.lines || []).map((text, i) => ({ seq: e.seq, line_no: i, text, level: e.data.level })));
    else if (e.type === "checkpoint") checkpoints.set(e.data.step, e.data); // the API's shape of the row
    else if (e.type === "fingerprint" || e.type === "resume") sections.add("attempt-records");
    else if (e.type === "stall") sections.add("run-stalls");
    else if (e.type === "alert") sections.add("run-alerts");
    else if (e.type === "profile") sections.add("run-profiles");
  }
  sections.forEach(refreshSection);
  // a new checkpoint can retire older ones (max_ckpts_to_keep): the API's list marks them, once for a burst
  if (events.some((e) => e.type === "checkpoint")) refreshCheckpoints();
  showState(run); // renders the table with the new rows meanwhile
}

// An attempt's fingerprint or resume report, a stall, a health alert or a profiler file arrived: the server renders that section
// again (it is stored before it is published), and the page takes it in place of its own.
async function refreshSection(id) {
  const response = await fetch(location.pathname, { headers: { Accept: "text/html" } });
  if (!response.ok) return;
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html").getElementById(id);
  if (fresh) document.getElementById(id)?.replaceWith(fresh);
  if (id === "run-stalls" && shown.version >= 0) showState(shown); // stalled, or running again
}

// A confirmation that says what will happen; resolves true when the user agrees. `danger`: the agreeing
// button looks destructive (the CSS class of every destructive button), as for a cancel.
function confirmAction(title, text, yes, { danger = false } = {}) {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  const yesButton = document.getElementById("confirm-yes");
  yesButton.textContent = yes;
  yesButton.classList.toggle("danger", danger);
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), { once: true }));
}

// POST an action; a refusal is shown in `errorBox`, next to the control that asked (and scrolled into view).
async function post(url, body, errorBox = document.getElementById("action-error")) {
  errorBox.textContent = "";
  const answer = await postJson(url, body);
  if (!answer.ok) {
    errorBox.textContent = errorText(answer);
    errorBox.scrollIntoView({ block: "nearest" });
    return null;
  }
  return answer.data;
}

function resumeText(step) {
  const latest = latestResumable();
  const total = shown.total_steps ?? "its last";
  if (latest && latest.step === step) {
    return `Run ${runId} continues from its checkpoint at step ${step} as a new attempt, training steps ${step + 1} to ${total}; its curves stay one line.`;
  }
  return `A new run starts from run ${runId}'s checkpoint at step ${step} and trains steps ${step + 1} to ${total}; run ${runId} stays as it is.`;
}

document.getElementById("cancel-run")?.addEventListener("click", async () => {
  const stop = `Run ${runId} is stopped: its Ray job is ended and it finishes as cancelled, whatever the stopping trainer reports. Checkpoints it saved stay, so it can be resumed later.`;
  if (!(await confirmAction(`Cancel run ${runId}?`, stop, "Cancel the run", { danger: true }))) return;
  await post(root.dataset.cancelUrl, {});
});

document.getElementById("checkpoints").addEventListener("click", async (event) => {
  const resume = event.target.closest("button[data-resume]");
  const fork = event.target.closest("button[data-fork]");
  if (resume) {
    const step = Number(resume.dataset.step);
    if (!(await confirmAction(`Resume from step ${step}?`, resumeText(step), "Resume"))) return;
    const body = await post(root.dataset.resumeUrl, { checkpoint: Number(resume.dataset.resume) },
      document.getElementById("checkpoint-error"));
    if (body && body.id !== runId) window.location.href = body.dashboard_url || `/runs/${body.id}/`;
  } else if (fork) {
    const form = document.getElementById("fork-form");
    const textarea = form.querySelector("textarea");
    form.hidden = false;
    form.querySelector("input[name=checkpoint]").value = fork.dataset.fork;
    form.querySelector("[data-fork-step]").textContent = fork.dataset.step;
    showForkErrors([]);
    const note = document.getElementById("fork-note");
    note.hidden = !fork.dataset.maxSteps;
    if (fork.dataset.maxSteps) { // the run finished all its steps here: a fork trains on only with a larger max_steps
      note.textContent = `Run ${runId} finished all its steps at step ${fork.dataset.step}: the fork trains on to the max_steps below.`;
      const lines = textarea.value.split("\n").filter((line) => line.trim() && !/^\s*max_steps\s*=/.test(line));
      textarea.value = [`max_steps=${fork.dataset.maxSteps}`, ...lines].join("\n");
    }
    textarea.focus();
  }
});

function forkOverrides(form) {
  return form.querySelector("textarea").value.split("\n").map((line) => line.trim()).filter(Boolean);
}

function showForkErrors(messages) {
  const list = document.getElementById("fork-errors");
  list.innerHTML = messages.map((m) => `<li>${escapeHtml(m)}</li>`).join("");
  list.hidden = !messages.length;
  if (messages.length) list.scrollIntoView({ block: "nearest" });
}

// Fork through the API, so that a refusal (an invalid override, a max_steps that trains nothing, a quota) is
// shown in the fork form, beside the overrides that caused it, instead of at the top of the page.
document.getElementById("fork-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const step = Number(form.querySelector("[data-fork-step]").textContent);
  const overrides = forkOverrides(form);
  const maxSteps = overrides.map((line) => line.match(/^max_steps\s*=\s*(\d+)$/)).filter(Boolean).at(-1)?.[1];
  const last = maxSteps ?? shown.total_steps;
  const trains = last ? ` The new run trains steps ${step + 1} to ${last}.` : "";
  const text = `A new experiment (run ${runId}'s config with ${overrides.length} override${overrides.length === 1 ? "" : "s"}) and a new run in it start from the checkpoint at step ${step}.${trains} Run ${runId} stays as it is.`;
  if (!(await confirmAction(`Fork from step ${step}?`, text, "Fork"))) return;
  showForkErrors([]);
  const answer = await postJson(root.dataset.forkUrl, { checkpoint: Number(form.querySelector("input[name=checkpoint]").value), overrides });
  if (!answer.ok) {
    const errors = answer.data.errors || [];
    showForkErrors(errors.length ? errors.map((e) => (e.field ? `${e.field}: ${e.message}` : e.message)) : [errorText(answer)]);
    return;
  }
  window.location.href = answer.data.dashboard_url || `/runs/${answer.data.id}/`;
});

const live = connectRun(runId, {
  lazy: true,
  onSnapshot,
  onSeries,
  onEvents,
  onRun: showState,
  onLogs: appendLogs,
  onState: (s) => { document.getElementById("live-state").textContent = s; },
});
window.policylab = { metrics, system, board, systemBoard, checkpoints, live, shownState: () => shown };
