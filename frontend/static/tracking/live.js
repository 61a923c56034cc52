// The run websocket: a snapshot on first connect, then live events; on reconnect it asks for
// `?after_seq=<last seen>` so the server replays exactly what was missed (no gap, no duplicate).

export function connectRun(runId, { onSnapshot, onSeries, onEvents, onState }) {
  let lastSeq = null;
  let retry = 500;
  let socket = null;

  function open() {
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    const query = lastSeq === null ? "" : `?after_seq=${lastSeq}`;
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
      }
      if (typeof data.seq === "number") lastSeq = Math.max(lastSeq ?? -1, data.seq);
      window.policylabLastSeq = lastSeq;
    };
    socket.onclose = () => {
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
