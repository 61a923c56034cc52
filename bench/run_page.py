"""Run page benchmark: a run with 100 metric keys x 10,000 steps (1,000,000 points) opened in Chromium.

    python bench/run_page.py [--keys 100] [--steps 10000] [--repeats 3] [--database-url postgres://…]

Services started here on a fresh database: redis-server (the Channels layer) and daphne serving the platform
(static files through WhiteNoise, as in production). The points are stored through ingest (`ingest_events`).

Measured in a headless Chromium (Debian's /usr/bin/chromium, 1400 x 900 viewport), median of --repeats loads
after one warm-up load, for this page and for its peer in the same run:

- first contentful paint (the browser's own entry);
- first meaningful paint: the first animation frame after the first chart's SVG is in the document;
- interactive: the charts in the first viewport are drawn and no long task (> 50 ms, PerformanceObserver)
  follows for 2 s; the time is the later of "drawn" and the end of the last long task;
- chart data: every request the page makes to the downsampling API (Resource Timing), and, from Python, one
  request per key with the page's max_points (1000) against the raw series (max_points 100000: all 10,000
  points of a key, no downsampling).

The peer is the eager page this one replaced: the run page's JavaScript of commit d59419e (every chart drawn
at once from the websocket snapshot's series), served in place of the current modules through Playwright's
request routing, against the same server and data. Ratios > 1 mean the current page is faster.
Goal (issue 16): interactive under 2 s, each chart's data under 300 ms.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "platform")]

from bench.platform_setup import bench_run, server_env, start_daphne  # noqa: E402
from scripts.services import free_port, start_redis, stop_processes  # noqa: E402

PEER_COMMIT = "d59419e"  # the eager run page (before issue 16)
PEER_MODULES = ("run_detail.js", "charts.js", "live.js", "plotly_config.js")
PREFIXES = ("reward", "eval", "actor", "critic", "rollout", "timing", "tokens", "data", "grad", "misc")
CHROMIUM = os.environ.get("POLICYLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]

# Installed before any page script: long tasks, and the first frame after the first chart's SVG appears.
PROBE = """
window.__longtasks = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__longtasks.push([e.startTime, e.startTime + e.duration]);
}).observe({ type: "longtask", buffered: true });
window.__fmp = null;
window.__visibleDrawn = null;
new MutationObserver((_, observer) => {
  if (document.querySelector("div.chart .main-svg")) {
    observer.disconnect();
    requestAnimationFrame(() => { window.__fmp = performance.now(); });
  }
}).observe(document, { childList: true, subtree: true });
function visibleDrawn() {
  const charts = [...document.querySelectorAll("#charts div.chart")].filter((div) => {
    const box = div.getBoundingClientRect();
    return box.bottom > 0 && box.top < window.innerHeight && box.height > 0;
  });
  if (charts.length && charts.every((div) => Number(div.dataset.points) > 0)) window.__visibleDrawn = performance.now();
  else requestAnimationFrame(visibleDrawn);
}
requestAnimationFrame(visibleDrawn);
"""


def setup(database_url: str, redis_url: str, work: Path, keys: int, steps: int):
    """A fresh database with one run of `keys` x `steps` points stored through ingest; returns (run, cookie,
    seconds spent storing)."""
    run, session = bench_run(database_url, redis_url, work, status="succeeded", current_step=steps, total_steps=steps)
    from policylab.tracking.ingest import ingest_events

    names = [f"{PREFIXES[k % len(PREFIXES)]}/metric_{k:02d}" for k in range(keys)]
    started = time.perf_counter()
    t0 = time.time() - steps
    for first in range(1, steps + 1, 200):
        events = [{"v": 1, "type": "metrics", "run_id": str(run.pk), "attempt": 1, "seq": step, "step": step,
                   "time": t0 + step, "data": {"values": {
                       name: math.sin(step / (50 + k)) + k / 10 + (step % 17) / 100 for k, name in enumerate(names)}}}
                  for step in range(first, min(first + 200, steps + 1))]
        ingest_events(events, publish=False, backfill_gaps=False)
    stored = time.perf_counter() - started
    return run, session, stored


def peer_modules() -> dict[str, str] | None:
    """The eager run page's modules at PEER_COMMIT, or None when this checkout lacks that commit."""
    modules = {}
    for name in PEER_MODULES:
        shown = subprocess.run(["git", "show", f"{PEER_COMMIT}:frontend/static/tracking/{name}"], cwd=REPO_ROOT,
                               capture_output=True, text=True)
        if shown.returncode:
            return None
        modules[name] = shown.stdout
    return modules


def serve(body: str):
    """A Playwright route handler answering with `body` as JavaScript."""
    return lambda route: route.fulfill(body=body, content_type="text/javascript")


def load_page(browser, url: str, cookie: dict, modules: dict[str, str] | None, quiet_s: float = 2.0,
              timeout_s: float = 120.0) -> dict:
    """One cold-cache load of the page in a fresh context; the timings of the module docstring, in ms."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.add_cookies([cookie])
    context.add_init_script(PROBE)
    for name, body in (modules or {}).items():
        context.route(f"**/static/tracking/{name}", serve(body))
    page = context.new_page()
    try:
        page.goto(url, wait_until="commit")
        deadline = time.monotonic() + timeout_s
        while page.evaluate("() => window.__visibleDrawn") is None:
            if time.monotonic() > deadline:
                raise SystemExit(f"charts not drawn within {timeout_s:.0f} s")
            time.sleep(0.05)
        while True:  # a quiet window: no long task for quiet_s
            now, last = page.evaluate("() => [performance.now(), Math.max(0, ...window.__longtasks.map((t) => t[1]))]")
            if now - last >= quiet_s * 1000 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        timings = page.evaluate("""() => ({
            fcp: performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? null,
            fmp: window.__fmp,
            drawn: window.__visibleDrawn,
            lastLong: Math.max(0, ...window.__longtasks.map((t) => t[1])),
            longest: Math.max(0, ...window.__longtasks.map((t) => t[1] - t[0])),
            charts: document.querySelectorAll("#charts div.chart").length,
            drawnCharts: [...document.querySelectorAll("#charts div.chart")].filter((d) => Number(d.dataset.points) > 0).length,
            api: performance.getEntriesByType("resource").filter((e) => e.name.includes("/metrics/?")).map((e) => e.duration),
        })""")
        timings["tti"] = max(timings["drawn"], timings["lastLong"])
        return timings
    finally:
        context.close()


def api_times(base: str, run_id: int, keys: list[str], cookie: dict, max_points: int) -> tuple[list[float], int]:
    """Milliseconds of one metrics API request per key (sequential), and the bytes of the last answer."""
    import urllib.request

    times, size = [], 0
    for key in keys:
        request = urllib.request.Request(f"{base}/api/runs/{run_id}/metrics/?keys={key}&max_points={max_points}",
                                         headers={"Cookie": f"{cookie['name']}={cookie['value']}"})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as answer:
            size = len(answer.read())
        times.append((time.perf_counter() - started) * 1000)
    return times, size


def summary(rows: list[dict], name: str) -> float:
    """The median of a timing over the loads; NaN when no load had it (a page that drew its charts before the
    probe's observer saw a chart appear has no first meaningful paint: the eager peer on a few keys)."""
    values = [r[name] for r in rows if r[name] is not None]
    return statistics.median(values) if values else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    parser.add_argument("--smoke", action="store_true", help="4 keys x 200 steps, 1 load each (CI: seconds)")
    args = parser.parse_args()
    if args.smoke:
        args.keys, args.steps, args.repeats = 4, 200, 1

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="policylab-bench-page-"))
    redis = start_redis(work, free_port())
    server = None
    try:
        database_url = args.database_url or f"sqlite:///{work / 'bench.sqlite3'}"
        run, session, stored_s = setup(database_url, redis.address, work, args.keys, args.steps)
        server, port = start_daphne(server_env(), work)
        base = f"http://127.0.0.1:{port}"
        from django.conf import settings

        cookie = {"name": settings.SESSION_COOKIE_NAME, "value": session, "url": base}
        from policylab.tracking.selectors import metric_keys

        keys = metric_keys(run)
        print(f"run {run.pk}: {len(keys)} keys x {args.steps} steps = {len(keys) * args.steps:,} points "
              f"(stored through ingest in {stored_s:.1f} s, {'SQLite' if database_url.startswith('sqlite') else 'PostgreSQL'})")

        fast, fast_bytes = api_times(base, run.pk, keys, cookie, 1000)
        raw, raw_bytes = api_times(base, run.pk, keys, cookie, 100_000)
        print(f"metrics API, one key per request, {len(keys)} requests:")
        print(f"  downsampled (max_points=1000, what a chart asks): median {statistics.median(fast):.0f} ms, "
              f"p95 {sorted(fast)[int(0.95 * (len(fast) - 1))]:.0f} ms, max {max(fast):.0f} ms, {fast_bytes / 1024:.0f} KiB")
        print(f"  raw series (all {args.steps} points):           median {statistics.median(raw):.0f} ms, "
              f"max {max(raw):.0f} ms, {raw_bytes / 1024:.0f} KiB")
        print(f"  ratio raw / downsampled: {statistics.median(raw) / statistics.median(fast):.1f}x time, "
              f"{raw_bytes / fast_bytes:.1f}x bytes")

        from playwright.sync_api import sync_playwright

        url = f"{base}/runs/{run.pk}/"
        peer = peer_modules()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                load_page(browser, url, cookie, None)  # warm-up: server imports, Python caches
                pages = {"current": [load_page(browser, url, cookie, None) for _ in range(args.repeats)]}
                if peer is not None:
                    pages["eager peer"] = [load_page(browser, url, cookie, peer) for _ in range(args.repeats)]
            finally:
                browser.close()

        print(f"run page in Chromium, median of {args.repeats} loads (ms since navigation start):")
        print(f"  {'page':<11} {'FCP':>6} {'FMP':>7} {'drawn':>7} {'interactive':>11} {'longest task':>12} "
              f"{'charts drawn':>12}  chart data requests (ms)")
        for name, rows in pages.items():
            api = [d for r in rows for d in r["api"]]
            api_text = (f"{len(api) / len(rows):.0f} per load, median {statistics.median(api):.0f}, max {max(api):.0f}"
                        if api else "none (series in the websocket snapshot)")
            print(f"  {name:<11} {summary(rows, 'fcp'):>6.0f} {summary(rows, 'fmp'):>7.0f} {summary(rows, 'drawn'):>7.0f} "
                  f"{summary(rows, 'tti'):>11.0f} {summary(rows, 'longest'):>12.0f} "
                  f"{rows[0]['drawnCharts']:>5} of {rows[0]['charts']:<4}  {api_text}")
        if peer is None:
            print(f"  (no eager peer: commit {PEER_COMMIT} is not in this checkout)")
        else:
            current, eager = pages["current"], pages["eager peer"]
            print(f"ratio eager peer / current: first meaningful paint {summary(eager, 'fmp') / summary(current, 'fmp'):.1f}x, "
                  f"interactive {summary(eager, 'tti') / summary(current, 'tti'):.1f}x")
        tti = summary(pages["current"], "tti")
        worst_chart = max(fast)
        in_page = [d for r in pages["current"] for d in r["api"]]
        print(f"goal: interactive < 2000 ms: {'met' if tti < 2000 else 'NOT met'} ({tti:.0f} ms); "
              f"each chart's data < 300 ms: {'met' if worst_chart < 300 else 'NOT met'} one key per request "
              f"(max {worst_chart:.0f} ms); in the page's own requests (4 keys each, served one after another while "
              f"the browser parses plotly.js) {'met' if max(in_page) < 300 else 'NOT met'} "
              f"(median {statistics.median(in_page):.0f} ms, max {max(in_page):.0f} ms)")
    finally:
        if server is not None:
            stop_processes([server], timeout=10)
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
