// The run websocket: a snapshot on first connect, then live events and `run` frames (the run's state,
// with a version, each time it changes); on reconnect it asks for `?after_seq=<last seen>` so the server
// replays exactly what was missed (no gap, no duplicate). `lazy`: the snapshot lists the metric keys
// without their series (pages that draw charts as they scroll into view). `logs` frames carry log lines
// stored outside trainer events (the Ray driver's output), which the page de-duplicates itself.

const ACCESS_REMOVED = 4403;  // tracking/access.py: token revoked, membership removed, signed out

export function connectRun(runId, { onSnapshot, onSeries, onEvents, onRun, onState, onLogs, lazy = false }) {
  let lastSeq = null;
  let retry = 500;
  let socket = null;

  function open() {
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    const params = new URLSearchParams(lazy ? { series: "lazy" } : {});
    if (lastSeq !== null) params.set("after_seq", String(lastSeq));
    const query = params.size ? `?${params}` : "";
    socket = new WebSocket(`${scheme}://${window.location.host}/ws/runs/${runId}/${query}`);
    onState?.("connecting…");
    socket.onopen = () => {
      retry = 500;
      onState?.("live");
    };
    socket.onmessage = (message) => {
      const data = JSON.parse(message.data);
      if (data.type === "snapshot") {
        onSnapshot(data);
      } else if (data.type === "series") {
        onSeries(data);
      } else if (data.type === "replay" || data.type === "events") {
        onEvents(data.events, data.run);
      } else if (data.type === "run") {
        onRun?.(data.run);
      } else if (data.type === "logs") {
        onLogs?.(data.lines);
      }
      if (typeof data.seq === "number") lastSeq = Math.max(lastSeq ?? -1, data.seq);
      window.policylabLastSeq = lastSeq;
    };
    socket.onclose = (event) => {
      if (event.code === ACCESS_REMOVED) {  // the server closed it: this page's access to the run has ended
        onState?.("access to this run has ended");
        return;
      }
      onState?.(`reconnecting in ${Math.round(retry / 100) / 10} s`);
      setTimeout(open, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }

  open();
  return { close: () => socket?.close(), get lastSeq() { return lastSeq; } };
}

export function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  if (match) return decodeURIComponent(match[1]);
  return document.querySelector("input[name=csrfmiddlewaretoken]")?.value || "";
}

export function escapeHtml(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

export async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  const data = await response.json().catch(() => ({}));
  return { ok: response.ok, status: response.status, data };
}

export async function postJson(url, body) {
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), Accept: "application/json" },
    body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  return { ok: response.ok, status: response.status, data };
}

// The error body of the API ({"errors": [{field, message}]}) as one line.
export function errorText(answer) {
  const errors = (answer.data.errors || []).map((e) => (e.field ? `${e.field}: ${e.message}` : e.message));
  return errors.join("; ") || `the server answered ${answer.status}`;
}

// A number rounded for reading (4 significant digits, no exponent for ordinary sizes); the exact value goes
// in a title attribute.
export function roundNumber(value) {
  if (value === null || value === undefined || Number.isNaN(Number(value))) return "—";
  const n = Number(value);
  if (Number.isInteger(n)) return String(n);
  const abs = Math.abs(n);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return n.toExponential(2);
  return String(Number(n.toPrecision(4)));
}

// `<span title="exact">rounded</span>` for a number from the server.
export function numberHtml(value) {
  const exact = value === null || value === undefined ? "" : String(value);
  return `<span class="num" title="${escapeHtml(exact)}">${escapeHtml(roundNumber(value))}</span>`;
}
