// Compare: every chosen run's metrics overlaid, one chart per key, drawn as charts scroll into view. Each
// run has its own websocket, so curves grow while the runs train; "time since start" lines runs up that
// started at different times.
import { ChartBoard, SeriesStore, bindControls } from "./charts.js";
import { connectRun, errorText, getJson, postJson } from "./live.js";

const root = document.getElementById("charts");
const runIds = root.dataset.runs.split(",").filter(Boolean).map(Number);
const config = JSON.parse(document.getElementById("chart-config").textContent);
const MAX_POINTS = 1000;

async function pin(key, pinned) {
  const answer = await postJson(root.dataset.pinsUrl, { key, pinned });
  return answer.ok ? answer.data.keys : null;
}

const board = new ChartBoard(root, {
  pinned: config.pinned, asyncPrefix: config.async_prefix, asyncCharts: config.async_charts, onPin: pin,
  csvName: `compare-${runIds.join("-")}`,
});
const updateCount = bindControls([board], ({ shown, total }) => {
  document.getElementById("chart-count").textContent = total ? `${shown} of ${total} charts` : "";
});
const connection = new Map(); // run id -> its websocket's state ("live" once connected)
const finished = new Map(); // run id -> whether the run's status is final (the server's `finished` flag)

// "live" counts runs whose status is live (queued … running, cancelling), not the open websockets: a
// finished run's socket is open too. A socket that dropped is said apart.
function showLive() {
  const live = runIds.filter((id) => finished.get(id) === false).length;
  const lost = runIds.filter((id) => connection.has(id) && !["live", "connecting…"].includes(connection.get(id))).length;
  document.getElementById("live-runs").textContent =
    `· ${live} of ${runIds.length} runs live${lost ? ` · ${lost} not connected` : ""}`;
}

const sources = runIds.map((id) => {
  const store = new SeriesStore();
  const source = {
    label: `run ${id}`,
    store,
    async load(keys) {
      const answer = await getJson(`/api/runs/${id}/metrics/?${new URLSearchParams({ keys: keys.join(","), max_points: MAX_POINTS })}`);
      if (!answer.ok) throw new Error(errorText(answer));
      store.load(answer.data.series);
    },
  };
  board.addSource(source);
  return { id, store, source };
});

for (const { id, store, source } of sources) {
  connectRun(id, {
    lazy: true,
    onSnapshot(snap) {
      store.series.clear();
      store.t0 = snap.metrics.length ? Math.min(...snap.metrics.map((m) => m.first_time)) : null;
      source.snapshotKeys = new Set(snap.metrics.map((m) => m.key));
      board.addKeys(source.snapshotKeys);
      board.invalidate(source);
      updateCount();
      onRun(id, snap.run);
    },
    onSeries() {},
    onEvents(events, run) {
      for (const e of events) {
        if (e.type !== "metrics") continue;
        for (const [key, value] of Object.entries(e.data.values || {})) {
          store.add(key, e.step, e.time, value);
          // a key the run did not have at its snapshot: every point of it arrives live
          if (!source.snapshotKeys?.has(key)) board.markLoaded(source, key);
          board.touch(key);
        }
      }
      updateCount();
      onRun(id, run);
    },
    onRun: (run) => onRun(id, run),
    onState(state) {
      connection.set(id, state);
      showLive();
    },
  });
}

function onRun(id, run) {
  if (!run) return;
  finished.set(id, Boolean(run.finished));
  showLive();
  const badge = document.querySelector(`[data-run-status="${id}"]`);
  if (!badge) return;
  badge.textContent = run.status;
  badge.className = `status status-${run.status}`;
}

// Adding or removing a run keeps the chart view: its parameters in the URL (charts.js) go along.
const chartView = () => [...new URLSearchParams(window.location.search)].filter(([name]) => name !== "runs");
document.getElementById("add-run")?.addEventListener("formdata", (event) => {
  for (const [name, value] of chartView()) event.formData.set(name, value);
});
document.getElementById("compared").addEventListener("click", (event) => {
  const link = event.target.closest("a.remove");
  if (!link) return;
  const url = new URL(link.href);
  for (const [name, value] of chartView()) url.searchParams.set(name, value);
  link.href = url.href;
});

window.policylab = { board, sources };
