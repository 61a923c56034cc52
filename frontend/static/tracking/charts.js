// Metric charts shared by the run dashboard and the compare page: a point store keyed by step
// (a resumed attempt that re-logs a step replaces the point), EMA smoothing, throttled plotly redraws.

import { PLOTLY_CONFIG } from "./plotly_config.js";

export const PREFIX_ORDER = ["reward", "eval", "actor", "critic", "timing", "system"];

export function groupOf(key) {
  const slash = key.indexOf("/");
  return slash > 0 ? key.slice(0, slash) : "other";
}

// TensorBoard-style debiased EMA: s_t = w·s_{t-1} + (1-w)·y_t, divided by (1 - w^t); nulls stay gaps.
export function ema(ys, weight) {
  if (!weight) return ys;
  let last = 0;
  let n = 0;
  return ys.map((y) => {
    if (y === null || y === undefined || Number.isNaN(y)) return null;
    last = last * weight + (1 - weight) * y;
    n += 1;
    return last / (1 - weight ** n);
  });
}

export class SeriesStore {
  constructor() {
    this.series = new Map(); // key -> Map(step -> [time, value])
  }

  add(key, step, time, value) {
    let points = this.series.get(key);
    const isNew = !points;
    if (isNew) {
      points = new Map();
      this.series.set(key, points);
    }
    points.set(step, [time, value]);
    return isNew;
  }

  load(seriesByKey) {
    for (const [key, s] of Object.entries(seriesByKey)) {
      for (let i = 0; i < s.step.length; i += 1) this.add(key, s.step[i], s.time[i], s.y[i]);
    }
  }

  keys() {
    return [...this.series.keys()].sort();
  }

  xy(key, axis) {
    const points = [...(this.series.get(key) || new Map()).entries()];
    if (axis === "time") points.sort((a, b) => a[1][0] - b[1][0]);
    else points.sort((a, b) => a[0] - b[0]);
    const x = points.map(([step, [time]]) => (axis === "time" ? new Date(time * 1000) : step));
    return { x, y: points.map(([, [, value]]) => value), steps: points.map(([step]) => step) };
  }
}

// One plotly chart per key, grouped in sections by prefix; redraws at most every `delayMs`.
export class ChartBoard {
  constructor(root, { delayMs = 300, traceName = (k) => k } = {}) {
    this.root = root;
    this.delayMs = delayMs;
    this.traceName = traceName;
    this.axis = "step";
    this.smoothing = 0;
    this.dirty = new Set();
    this.timer = null;
    this.sources = []; // [{label, store}] — one per run on the compare page
  }

  section(group) {
    let section = this.root.querySelector(`section[data-group="${CSS.escape(group)}"]`);
    if (!section) {
      section = document.createElement("section");
      section.dataset.group = group;
      section.className = "chart-group";
      section.innerHTML = `<h2>${group}/</h2><div class="chart-grid"></div>`;
      const sections = [...this.root.querySelectorAll("section.chart-group")];
      const rank = (g) => (PREFIX_ORDER.includes(g) ? PREFIX_ORDER.indexOf(g) : PREFIX_ORDER.length);
      const before = sections.find((s) => rank(s.dataset.group) > rank(group) || (rank(s.dataset.group) === rank(group) && s.dataset.group > group));
      this.root.insertBefore(section, before || null);
    }
    return section.querySelector(".chart-grid");
  }

  chart(key) {
    let div = this.root.querySelector(`div.chart[data-key="${CSS.escape(key)}"]`);
    if (!div) {
      div = document.createElement("div");
      div.className = "chart";
      div.dataset.key = key;
      div.dataset.points = "0";
      const grid = this.section(groupOf(key));
      const after = [...grid.children].find((c) => c.dataset.key > key);
      grid.insertBefore(div, after || null);
    }
    return div;
  }

  touch(key) {
    this.dirty.add(key);
    if (!this.timer) this.timer = setTimeout(() => this.flush(), this.delayMs);
  }

  touchAll() {
    for (const { store } of this.sources) for (const key of store.keys()) this.dirty.add(key);
    this.flush();
  }

  flush() {
    this.timer = null;
    const keys = [...this.dirty];
    this.dirty.clear();
    for (const key of keys) this.draw(key);
  }

  draw(key) {
    const div = this.chart(key);
    const traces = [];
    let points = 0;
    const palette = ["#2f6fdd", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#c2255c", "#5c940d"];
    this.sources.forEach(({ label, store }, i) => {
      const { x, y } = store.xy(key, this.axis);
      if (!x.length) return;
      points = Math.max(points, x.length);
      const color = palette[i % palette.length];
      const name = this.sources.length > 1 ? label : key;
      if (this.smoothing > 0) {
        traces.push({ x, y, name: `${name} (raw)`, mode: "lines", line: { color, width: 1 }, opacity: 0.25, showlegend: false, hoverinfo: "skip" });
        traces.push({ x, y: ema(y, this.smoothing), name, mode: "lines", line: { color, width: 2 } });
      } else {
        traces.push({ x, y, name, mode: x.length < 60 ? "lines+markers" : "lines", line: { color, width: 2 }, marker: { size: 4 } });
      }
    });
    div.dataset.points = String(points);
    const layout = {
      title: { text: key, font: { size: 13 } },
      margin: { l: 50, r: 10, t: 30, b: 35 },
      height: 240,
      showlegend: this.sources.length > 1,
      legend: { orientation: "h" },
      xaxis: { title: { text: this.axis }, type: this.axis === "time" ? "date" : "linear" },
      uirevision: `${key}-${this.axis}`,
    };
    window.Plotly.react(div, traces, layout, PLOTLY_CONFIG);
  }
}

export function bindControls(board) {
  const slider = document.getElementById("smoothing");
  const label = document.getElementById("smoothing-value");
  const axis = document.getElementById("x-axis");
  slider?.addEventListener("input", () => {
    board.smoothing = Number(slider.value);
    label.textContent = slider.value;
    board.touchAll();
  });
  axis?.addEventListener("change", () => {
    board.axis = axis.value;
    board.touchAll();
  });
}
