"""Rollout search benchmark: text search over a run's samples from the index vs the linear scan it replaced.

    python bench/rollout_search.py [--samples 100000] [--databases sqlite postgres] [--repeats 5]
    python bench/rollout_search.py --smoke          # 2,000 samples: the whole path in seconds (CI)

For each database (a fresh SQLite file; a fresh PostgreSQL database `policylab_bench_search` on
127.0.0.1:5432), one run of `--samples` samples (prompts of ~25 words, responses of ~80, a 80-entry
log-prob list each, as ingest stores them) is stored with bulk_create through the migrated schema, so the
search index (tracking migration 0009: FTS5 trigram on SQLite, pg_trgm GIN on PostgreSQL) is kept by the
database itself; on PostgreSQL a VACUUM ANALYZE follows, as autovacuum runs after a bulk load. Then, per query, median of --repeats after one warm-up:

- indexed: GET /api/runs/<id>/rollouts/?q=… through Django's test client (the whole request: count, first
  page of 50, steps, stop reasons), as it is served now;
- linear: the same request with the search's filter replaced by the `icontains` scan of before (on
  PostgreSQL the trigram indexes are dropped for this half, since `icontains` itself uses them);
- before: linear, and without the (run, stop_reason) index too: the request as it was served before issue 41
  (each search also listed the run's stop reasons by reading every sample).

Queries: one planted unique token (1 sample), a planted rare word (0.1 %), a phrase in ~10 %, a word in most
samples, and a two-character text (below a trigram: both sides scan). Prints each time, the ratio linear /
indexed per query, and whether the indexed search answered every query of >= 3 characters under 300 ms
(issue 41's goal, on a run of 100,000 samples).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "platform")]

PG_ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
PG_BENCH_DB = "policylab_bench_search"
GOAL_MS = 300.0
_WORD_TEXT = ("the of and to in is that for it as with was on be by this are from at an or have not but which one "
              "all their will there can more if some what would when about into than then them these so other time "
              "has two number way could people my first water been call who its now find long down day did get come "
              "made may part step value sum answer result compute total equal prime divide multiply square root")
WORDS = tuple(_WORD_TEXT.split(" "))
QUERIES = (("unique", "needle-31337"), ("rare word", "marzipan"), ("phrase ~10%", "the answer is 4"),
           ("common word", "the"), ("2 characters", "zq"))


def sample_texts(rng: random.Random, index: int, samples: int) -> tuple[str, str]:
    prompt = " ".join(rng.choices(WORDS, k=25))
    response = " ".join(rng.choices(WORDS, k=80))
    if index == 31337 % samples:  # exactly one sample, whatever the size
        response += " needle-31337"
    if index % 1000 == 7:
        prompt += " marzipan"
    if index % 10 == 3:
        response += " so the answer is 4"
    return prompt, response


def store(run, samples: int, seed: int = 0) -> float:
    """`samples` samples of `run` (bulk_create, 2,000 a batch); returns seconds."""
    from policylab.tracking.models import RolloutSample

    rng = random.Random(seed)
    started = time.perf_counter()
    batch = []
    for i in range(samples):
        prompt, response = sample_texts(rng, i, samples)
        batch.append(RolloutSample(run=run, step=i // 64, group_id=(i % 64) // 8, sample_index=i % 8, prompt=prompt,
                                   response=response, reward=rng.random(), advantage=0.0, prompt_length=25,
                                   response_length=80, stop_reason="eos", seq=i, time=float(i),
                                   token_logprobs=[round(-rng.random(), 4) for _ in range(80)]))
        if len(batch) == 2000:
            RolloutSample.objects.bulk_create(batch)
            batch = []
    RolloutSample.objects.bulk_create(batch)
    return time.perf_counter() - started


def timed_ms(call, repeats: int) -> float:
    call()  # warm-up (caches, plans)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(database_url: str, samples: int, repeats: int) -> int:
    """One database: store the run, time every query indexed and linear, print the lines."""
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        from bench.platform_setup import bench_run

        run, session = bench_run(database_url, "redis://127.0.0.1:6379/15", Path(tmp))
        from django.conf import settings
        from django.db import connection
        from django.db.models import Q
        from django.test import Client

        from policylab.tracking import selectors

        vendor = connection.vendor
        stored_s = store(run, samples)
        if vendor == "postgresql":  # what autovacuum does after a bulk load: statistics, and the visibility map
            with connection.cursor() as cursor:  # that index-only scans need
                cursor.execute("VACUUM ANALYZE tracking_rolloutsample")
        client = Client()
        client.cookies[settings.SESSION_COOKIE_NAME] = session
        url = f"/api/runs/{run.pk}/rollouts/"

        def search(q: str):
            def call() -> int:
                response = client.get(url, {"q": q})
                assert response.status_code == 200, response.content[:300]
                return response.json()["count"]
            return call

        print(f"{vendor}: {samples:,} samples stored in {stored_s:.1f} s (index kept by the database)")
        indexed = {name: (timed_ms(search(q), repeats), search(q)()) for name, q in QUERIES}
        original = selectors.rollout_text_filter
        selectors.rollout_text_filter = lambda q: Q(prompt__icontains=q) | Q(response__icontains=q)
        if vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("DROP INDEX rollout_prompt_trgm; DROP INDEX rollout_response_trgm")
        try:
            linear = {name: (timed_ms(search(q), repeats), search(q)()) for name, q in QUERIES}
            with connection.cursor() as cursor:
                cursor.execute("DROP INDEX rollout_run_stop_reason")
            before = {name: timed_ms(search(q), repeats) for name, q in QUERIES}
        finally:
            selectors.rollout_text_filter = original
        ratios, ratios_before = [], []
        for name, q in QUERIES:
            (fast, hits), (slow, hits_linear) = indexed[name], linear[name]
            if hits != hits_linear:
                print(f"  MISMATCH {name} {q!r}: indexed found {hits}, linear {hits_linear}")
                return 1
            ratios.append(slow / fast)
            ratios_before.append(before[name] / fast)
            print(f"  {name:13} q={q!r:18} {hits:>7,} matches: indexed {fast:7.1f} ms, linear {slow:7.1f} ms "
                  f"(x{slow / fast:.1f}), before {before[name]:7.1f} ms (x{before[name] / fast:.1f})")
        indexable = [indexed[name][0] for name, q in QUERIES if len(q) >= 3]
        print(f"ratio {vendor} linear / indexed, median over queries: {statistics.median(ratios):.1f}x; before / "
              f"indexed: {statistics.median(ratios_before):.1f}x (slowest indexed query of >= 3 characters: "
              f"{max(indexable):.1f} ms; goal < {GOAL_MS:.0f} ms: {'met' if max(indexable) < GOAL_MS else 'NOT met'})")
        return 0


def fresh_postgres() -> str:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {PG_BENCH_DB}")
        admin.execute(f"CREATE DATABASE {PG_BENCH_DB}")
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{PG_BENCH_DB}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--databases", nargs="+", choices=("sqlite", "postgres"), default=["sqlite", "postgres"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="2,000 samples, 2 repeats: the whole path in seconds")
    parser.add_argument("--database-url", help=argparse.SUPPRESS)  # one database, in a child process
    args = parser.parse_args()
    samples, repeats = (2_000, 2) if args.smoke else (args.samples, args.repeats)
    if args.database_url:
        return measure(args.database_url, samples, repeats)
    code = 0
    with tempfile.TemporaryDirectory(prefix="bench-search-db-") as tmp:
        for database in args.databases:  # Django configures one database a process
            url = f"sqlite:///{Path(tmp) / 'search.sqlite3'}" if database == "sqlite" else fresh_postgres()
            code |= subprocess.run([sys.executable, __file__, "--database-url", url, "--samples", str(samples),
                                    "--repeats", str(repeats)], env=os.environ).returncode
    return code


if __name__ == "__main__":
    sys.exit(main())
