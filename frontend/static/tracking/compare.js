// Compare: every chosen run's metrics overlaid, one chart per key.
import { ChartBoard, SeriesStore, bindControls } from "./charts.js";

const root = document.getElementById("charts");
const runIds = root.dataset.runs.split(",").filter(Boolean).map(Number);
const board = new ChartBoard(root);
bindControls(board);

async function load() {
  for (const id of runIds) {
    const response = await fetch(`/api/runs/${id}/metrics/?max_points=2000`, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) continue;
    const store = new SeriesStore();
    store.load((await response.json()).series);
    board.sources.push({ label: `run ${id}`, store });
  }
  board.touchAll();
}

load();
