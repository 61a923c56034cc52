// Metric charts shared by the run dashboard and the compare page.
//
// A SeriesStore keeps a run's points keyed by step (a resumed attempt that re-logs a step replaces the
// point). A ChartBoard lays out one chart per metric key, grouped by prefix, with the user's pinned charts
// first and the trainer's `async/` keys in a panel of their own (several keys to a chart, as the server's
// tracking/panels.py says). Charts are drawn lazily: a chart's series is asked of the downsampling API when
// the chart first scrolls into view, and live points only redraw charts that are on screen. Controls:
// metric search, EMA smoothing, x axis (step, wall time, time since the run's start), log-scale y, all four
// in the page's URL so that a chart view can be shared; each chart can be pinned and downloaded as CSV
// (exactly the traces it shows).

import { PLOTLY_CONFIG } from "./plotly_config.js";

export const PREFIX_ORDER = ["reward", "eval", "actor", "critic", "rollout", "timing", "system"];
const PALETTE = ["#2f6fdd", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#c2255c", "#5c940d"];
const AXIS_TITLES = { step: "step", time: "time", relative: "time since start" };
const CHART_KEYS_PER_REQUEST = 4; // small requests: the first charts appear while the others load
// plotly.js (4.8 MB) loads `async`: the page asks for its data meanwhile, and draws once it is there.
const plotlyReady = new Promise((resolve) => {
  if (window.Plotly) resolve();
  else document.getElementById("plotly-js")?.addEventListener("load", () => resolve(), { once: true });
});

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

// A search box's text as a test on keys: a case-insensitive regular expression, or plain text when it is
// not one.
export function keyMatcher(text) {
  const query = text.trim();
  if (!query) return () => true;
  try {
    const pattern = new RegExp(query, "i");
    return (key) => pattern.test(key);
  } catch {
    const lower = query.toLowerCase();
    return (key) => key.toLowerCase().includes(lower);
  }
}

export class SeriesStore {
  constructor() {
    this.series = new Map(); // key -> Map(step -> [time, value])
    this.t0 = null; // unix time of the run's first metric point (the relative-time axis starts there)
  }

  add(key, step, time, value) {
    let points = this.series.get(key);
    const isNew = !points;
    if (isNew) {
      points = new Map();
      this.series.set(key, points);
    }
    points.set(step, [time, value]);
    if (this.t0 === null || time < this.t0) this.t0 = time;
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
    if (axis === "step") points.sort((a, b) => a[0] - b[0]);
    else points.sort((a, b) => a[1][0] - b[1][0]);
    const t0 = this.t0 ?? 0;
    const x = points.map(([step, [time]]) => (axis === "time" ? new Date(time * 1000) : axis === "relative" ? time - t0 : step));
    return { x, y: points.map(([, [, value]]) => value), steps: points.map(([step]) => step) };
  }
}

// Seconds since the start in the unit that reads best for the span shown.
function relativeUnit(seconds) {
  if (seconds > 2 * 3600) return { div: 3600, name: "h" };
  if (seconds > 120) return { div: 60, name: "min" };
  return { div: 1, name: "s" };
}

function csvCell(value) {
  const text = value instanceof Date ? value.toISOString() : value === null || value === undefined ? "" : String(value);
  return /[",\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

// One chart per metric key (and the panel's combined charts), laid out in sections; see the file comment.
// A source is {label, store, load?}: `load(keys)` fetches those keys' series into the store (lazy charts); a
// source without `load` has all its points in its store already. `loadedKeys` / `inFlight` are the board's.
export class ChartBoard {
  constructor(root, { delayMs = 300, lazy = true, pinned = [], asyncPrefix = null, asyncCharts = [], onPin = null,
    csvName = "chart" } = {}) {
    this.root = root;
    this.delayMs = delayMs;
    this.lazy = lazy;
    this.pinned = new Set(pinned);
    this.asyncPrefix = asyncPrefix;
    this.asyncCharts = asyncCharts.map((c) => ({ id: `panel:${c.title}`, title: c.title, keys: [...c.keys] }));
    this.onPin = onPin;
    this.csvName = csvName;
    this.axis = "step";
    this.smoothing = 0;
    this.logY = false;
    this.match = () => true;
    this.sources = [];
    this.charts = new Map(); // id -> {id, title, keys, el, div, group, visible, dirty}
    this.byKey = new Map(); // metric key -> [chart ids]
    this.timer = null;
    this.dirty = new Set();
    this.pendingLoads = new Map(); // source index -> Set(keys)
    this.loadTimer = null;
    this.observer = lazy ? new IntersectionObserver((entries) => this.onVisibility(entries), { rootMargin: "200px" }) : null;
  }

  addSource(source) {
    source.loadedKeys = new Set();
    source.inFlight = new Set();
    this.sources.push(source);
    for (const key of source.store.keys()) this.ensureKey(key);
    return this.sources.length - 1;
  }

  // Keys a source has, known before their points (the snapshot's `metrics` list): charts laid out, not drawn.
  addKeys(keys) {
    for (const key of keys) this.ensureKey(key);
  }

  isAsync(key) {
    return this.asyncPrefix !== null && key.startsWith(this.asyncPrefix);
  }

  ensureKey(key) {
    if (this.byKey.has(key)) return;
    const ids = [];
    const panel = this.isAsync(key) ? this.asyncCharts.find((c) => c.keys.includes(key)) : null;
    if (panel) {
      ids.push(panel.id);
      if (!this.charts.has(panel.id)) this.createChart(panel.id, panel.title, panel.keys, "async");
    } else {
      ids.push(key);
      this.createChart(key, key, [key], this.isAsync(key) ? "async" : this.pinned.has(key) ? "pinned" : groupOf(key));
    }
    this.byKey.set(key, ids);
  }

  section(group) {
    let section = this.root.querySelector(`section[data-group="${CSS.escape(group)}"]`);
    if (!section) {
      section = document.createElement("section");
      section.dataset.group = group;
      section.className = `chart-group${group === "async" ? " async-panel card" : ""}`;
      const title = group === "pinned" ? "Pinned" : group === "async" ? "Async rollout" : `${group}/`;
      const help = group === "async"
        ? `<p class="meta">Generation running ahead of training: how stale the trained samples are, who waited for whom, weight syncs and the off-policy correction.</p>`
        : "";
      section.innerHTML = `<h2>${title}</h2>${help}<div class="chart-grid"></div>`;
      const fixed = { pinned: -2, async: -1 };
      const rank = (g) => fixed[g] ?? (PREFIX_ORDER.includes(g) ? PREFIX_ORDER.indexOf(g) : PREFIX_ORDER.length);
      const sections = [...this.root.querySelectorAll("section.chart-group")];
      const before = sections.find((s) => rank(s.dataset.group) > rank(group) || (rank(s.dataset.group) === rank(group) && s.dataset.group > group));
      this.root.insertBefore(section, before || null);
    }
    return section.querySelector(".chart-grid");
  }

  createChart(id, title, keys, group) {
    const el = document.createElement("figure");
    el.className = "chart-card";
    el.dataset.chart = id;
    // the panel's charts in the order the server lists them, every other chart by key
    const panelIndex = this.asyncCharts.findIndex((c) => c.id === id);
    el.dataset.order = panelIndex >= 0 ? `#${String(panelIndex).padStart(3, "0")}` : id;
    const single = keys.length === 1 && id === keys[0];
    el.innerHTML = `<figcaption><span class="chart-title"></span>
      ${single ? `<button type="button" class="chart-pin link" aria-pressed="false"></button>` : ""}
      <button type="button" class="chart-csv link" title="Download what this chart shows as CSV">CSV</button></figcaption>
      <div class="chart" data-points="0"></div>`;
    el.querySelector(".chart-title").textContent = title;
    const div = el.querySelector("div.chart");
    div.dataset.key = id;
    const chart = { id, title, keys, el, div, group, visible: !this.lazy, dirty: true };
    this.charts.set(id, chart);
    el.querySelector(".chart-csv").addEventListener("click", () => this.downloadCsv(chart));
    el.querySelector(".chart-pin")?.addEventListener("click", () => this.togglePin(chart));
    this.place(chart);
    this.filterOne(chart);
    this.observer?.observe(el);
    return chart;
  }

  place(chart) {
    const pinned = this.pinned.has(chart.id);
    const group = chart.group === "async" ? "async" : pinned ? "pinned" : groupOf(chart.id);
    const grid = this.section(group);
    const after = [...grid.children].find((c) => c.dataset.order > chart.el.dataset.order);
    grid.insertBefore(chart.el, after || null);
    const pin = chart.el.querySelector(".chart-pin");
    if (pin) {
      pin.textContent = pinned ? "unpin" : "pin";
      pin.setAttribute("aria-pressed", String(pinned));
    }
    this.pruneSections();
  }

  pruneSections() {
    for (const section of this.root.querySelectorAll("section.chart-group")) {
      const cards = [...section.querySelectorAll("figure.chart-card")];
      if (!cards.length) section.remove();
      else section.hidden = cards.every((c) => c.hidden);
    }
  }

  async togglePin(chart) {
    const pinned = !this.pinned.has(chart.id);
    if (pinned) this.pinned.add(chart.id);
    else this.pinned.delete(chart.id);
    this.place(chart);
    if (this.onPin) {
      const keys = await this.onPin(chart.id, pinned);
      if (keys) this.pinned = new Set(keys);
    }
  }

  setFilter(text) {
    this.match = keyMatcher(text);
    for (const chart of this.charts.values()) this.filterOne(chart);
    this.pruneSections();
  }

  filterOne(chart) {
    chart.el.hidden = !(this.match(chart.id) || chart.keys.some((k) => this.match(k)) || this.match(chart.title));
  }

  shownCount() {
    const all = [...this.charts.values()];
    return { shown: all.filter((c) => !c.el.hidden).length, total: all.length };
  }

  onVisibility(entries) {
    for (const entry of entries) {
      const chart = this.charts.get(entry.target.dataset.chart);
      if (!chart) continue;
      chart.visible = entry.isIntersecting;
      if (chart.visible) this.need(chart);
    }
  }

  loaded(chart) {
    return this.sources.every((s) => !s.load || chart.keys.every((k) => s.loadedKeys.has(k)));
  }

  // A visible chart: ask for the series it lacks, else draw it if something changed.
  need(chart) {
    let waiting = false;
    this.sources.forEach((source, i) => {
      if (!source.load) return;
      const missing = chart.keys.filter((k) => !source.loadedKeys.has(k));
      if (!missing.length) return;
      waiting = true;
      const keys = this.pendingLoads.get(i) || new Set();
      missing.filter((k) => !source.inFlight.has(k)).forEach((k) => keys.add(k));
      this.pendingLoads.set(i, keys);
    });
    if (waiting) {
      if (!this.loadTimer) this.loadTimer = setTimeout(() => this.flushLoads(), 16);
    } else if (chart.dirty) {
      this.dirty.add(chart.id);
      this.schedule(chart.drawn ? this.delayMs : 0); // a first drawing waits for nothing
    }
  }

  // Charts that became visible together share requests per source (CHART_KEYS_PER_REQUEST keys each).
  flushLoads() {
    this.loadTimer = null;
    const loads = [...this.pendingLoads.entries()];
    this.pendingLoads.clear();
    for (const [i, keySet] of loads) {
      const source = this.sources[i];
      const keys = [...keySet];
      for (let start = 0; start < keys.length; start += CHART_KEYS_PER_REQUEST) {
        const part = keys.slice(start, start + CHART_KEYS_PER_REQUEST);
        part.forEach((k) => source.inFlight.add(k));
        Promise.resolve(source.load(part)).then(() => {
          part.forEach((k) => source.loadedKeys.add(k));
          this.afterLoad(part);
        }).catch(() => { /* the next scroll into view asks again */ }).finally(() => {
          part.forEach((k) => source.inFlight.delete(k));
        });
      }
    }
  }

  afterLoad(keys) {
    const ids = new Set(keys.flatMap((k) => this.byKey.get(k) || []));
    for (const id of ids) {
      const chart = this.charts.get(id);
      chart.dirty = true;
      if (chart.visible) this.need(chart);
    }
  }

  // Forget what `source` loaded (its fresh snapshot, e.g. after a long disconnect): visible charts ask again.
  invalidate(source) {
    source.loadedKeys.clear();
    for (const chart of this.charts.values()) {
      chart.dirty = true;
      if (chart.visible) this.need(chart);
    }
  }

  // A source's points for `key` are complete without asking the API (the key first appeared live).
  markLoaded(source, key) {
    source.loadedKeys.add(key);
  }

  touch(key) {
    this.ensureKey(key);
    for (const id of this.byKey.get(key)) {
      const chart = this.charts.get(id);
      chart.dirty = true;
      if (chart.visible) this.dirty.add(id);
    }
    this.schedule();
  }

  touchAll() {
    for (const chart of this.charts.values()) {
      chart.dirty = true;
      if (chart.visible) this.need(chart);
    }
    this.flush();
  }

  // Live points redraw at most every delayMs; `delay` 0 (a chart's first drawing) brings the next redraw forward.
  schedule(delay = this.delayMs) {
    if (!this.dirty.size || (this.timer && delay > 0)) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.flush(), delay);
  }

  flush() {
    clearTimeout(this.timer);
    this.timer = null;
    if (!window.Plotly) {
      plotlyReady.then(() => this.flush());
      return;
    }
    const ids = [...this.dirty];
    this.dirty.clear();
    for (const id of ids) {
      const chart = this.charts.get(id);
      if (chart && chart.visible && this.loaded(chart)) this.draw(chart);
      else if (chart) chart.dirty = true;
    }
  }

  traces(chart) {
    const traces = [];
    let colour = 0;
    let span = 0;
    const many = this.sources.length > 1;
    for (const { label, store } of this.sources) {
      for (const key of chart.keys) {
        const { x, y } = store.xy(key, this.axis);
        if (!x.length) continue;
        if (this.axis === "relative") span = Math.max(span, x[x.length - 1]);
        const short = chart.keys.length > 1 ? key.slice(key.indexOf("/") + 1) : key; // a panel's keys share a prefix
        const name = many && chart.keys.length > 1 ? `${label} ${short}` : many ? label : short;
        traces.push({ name, key, x, y, color: PALETTE[colour % PALETTE.length] });
        colour += 1;
      }
    }
    const unit = this.axis === "relative" ? relativeUnit(span) : null;
    if (unit) for (const t of traces) t.x = t.x.map((v) => v / unit.div);
    return { traces, unit };
  }

  // The plotly traces of a chart with the board's current settings (what it shows, and what its CSV holds).
  plotted(chart) {
    const { traces, unit } = this.traces(chart);
    const plotted = [];
    for (const t of traces) {
      if (this.smoothing > 0) {
        plotted.push({ x: t.x, y: t.y, name: `${t.name} (raw)`, mode: "lines", line: { color: t.color, width: 1 }, opacity: 0.25, showlegend: false, hoverinfo: "skip" });
        plotted.push({ x: t.x, y: ema(t.y, this.smoothing), name: t.name, mode: "lines", line: { color: t.color, width: 2 } });
      } else {
        plotted.push({ x: t.x, y: t.y, name: t.name, mode: t.x.length < 60 ? "lines+markers" : "lines", line: { color: t.color, width: 2 }, marker: { size: 4 } });
      }
    }
    return { plotted, unit, points: Math.max(0, ...traces.map((t) => t.x.length)) };
  }

  draw(chart) {
    chart.dirty = false;
    chart.drawn = true;
    const { plotted, unit, points } = this.plotted(chart);
    chart.div.dataset.points = String(points);
    chart.div.dataset.axis = this.axis;
    chart.div.dataset.logY = String(this.logY);
    const xTitle = unit ? `${AXIS_TITLES.relative} (${unit.name})` : AXIS_TITLES[this.axis];
    const legend = plotted.length > 1 && (this.sources.length > 1 || chart.keys.length > 1);
    const layout = {
      margin: { l: 50, r: 10, t: legend ? 36 : 10, b: 35 },
      height: 230,
      showlegend: legend,
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", font: { size: 11 } },
      xaxis: { title: { text: xTitle }, type: this.axis === "time" ? "date" : "linear" },
      yaxis: { type: this.logY ? "log" : "linear" },
      uirevision: `${chart.id}-${this.axis}-${this.logY}`,
    };
    window.Plotly.react(chart.div, plotted, layout, PLOTLY_CONFIG);
    if (!this.firstDraw) {
      this.firstDraw = performance.now();
      performance.mark("policylab:first-chart");
    }
  }

  downloadCsv(chart) {
    const { plotted, unit } = this.plotted(chart);
    const axis = unit ? `time_since_start_${unit.name}` : this.axis;
    const rows = [["trace", axis, "value"]];
    for (const t of plotted) t.x.forEach((x, i) => rows.push([t.name, x, t.y[i]]));
    const text = `${rows.map((r) => r.map(csvCell).join(",")).join("\n")}\n`;
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
    link.download = `${this.csvName}-${chart.id.replace(/[^\w.-]+/g, "_")}.csv`;
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
  }
}

// The chart controls' state as URL parameters (a default value is left out), e.g.
// `?search=kl&smoothing=0.6&log_y=1&x=relative`; other parameters of the page (compare's `runs`) stay.
function chartParams({ slider, axis, logY, search }) {
  return {
    search: search?.value.trim() ?? "",
    smoothing: slider && Number(slider.value) ? slider.value : "",
    log_y: logY?.checked ? "1" : "",
    x: axis && axis.value !== "step" ? axis.value : "",
  };
}

function remember(controls) {
  const params = new URLSearchParams(window.location.search);
  for (const [name, value] of Object.entries(chartParams(controls))) {
    if (value) params.set(name, value);
    else params.delete(name);
  }
  const query = params.toString().replace(/%2C/g, ","); // `runs=1,2` stays readable
  window.history.replaceState(window.history.state, "", `${window.location.pathname}${query ? `?${query}` : ""}${window.location.hash}`);
}

function restore({ slider, label, axis, logY, search }) {
  const params = new URLSearchParams(window.location.search);
  if (search && params.has("search")) search.value = params.get("search");
  if (slider && params.has("smoothing")) slider.value = params.get("smoothing"); // the range clamps it
  if (label && slider) label.textContent = slider.value;
  if (logY) logY.checked = params.get("log_y") === "1";
  if (axis && [...axis.options].some((o) => o.value === params.get("x"))) axis.value = params.get("x");
}

// Wire the chart controls of a page to one or more boards (the run page also has system charts); their state
// comes from the page's URL and goes back to it on every change.
export function bindControls(boards, onCount = null) {
  const controls = {
    slider: document.getElementById("smoothing"),
    label: document.getElementById("smoothing-value"),
    axis: document.getElementById("x-axis"),
    logY: document.getElementById("log-y"),
    search: document.getElementById("metric-search"),
  };
  const { slider, label, axis, logY, search } = controls;
  const count = () => onCount?.(boards[0].shownCount());
  restore(controls);
  for (const board of boards) {
    board.smoothing = Number(slider?.value || 0);
    board.logY = Boolean(logY?.checked);
    if (axis && !board.fixedAxis) board.axis = axis.value;
  }
  if (search) boards[0].setFilter(search.value);
  slider?.addEventListener("input", () => {
    label.textContent = slider.value;
    for (const board of boards) { board.smoothing = Number(slider.value); board.touchAll(); }
    remember(controls);
  });
  axis?.addEventListener("change", () => {
    for (const board of boards.filter((b) => !b.fixedAxis)) { board.axis = axis.value; board.touchAll(); }
    remember(controls);
  });
  logY?.addEventListener("change", () => {
    for (const board of boards) { board.logY = logY.checked; board.touchAll(); }
    remember(controls);
  });
  search?.addEventListener("input", () => {
    boards[0].setFilter(search.value);
    count();
    remember(controls);
  });
  count();
  return count;
}
