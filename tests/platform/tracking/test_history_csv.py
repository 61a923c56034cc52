"""Issue 35, item 9: History downloads its table as CSV: the runs its filters match (every page), in its order,
with its metric columns (last and best), exact values where the table rounds them."""

from __future__ import annotations

import csv
import io
import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from policylab.experiments.models import RunStatus
from policylab.tracking.ingest import ingest_events
from policylab.tracking.selectors import MetricColumn
from policylab.tracking.services import history_csv_rows
from tests.platform.tracking.conftest import event

pytestmark = pytest.mark.django_db


def logged(run, values_by_step: dict[int, dict[str, float]]) -> None:
    events = [event("metrics", run.pk, seq, step, {"values": values}) for seq, (step, values) in
              enumerate(sorted(values_by_step.items()), start=1)]
    ingest_events(events, run_id=run.pk, publish=False)


@pytest.fixture
def runs(make_run, user):
    """Three runs of the user's team: two succeeded (with metrics), one failed."""
    low = make_run(user=user, name="low lr", tags=["sweep", "lr"], status=RunStatus.SUCCEEDED, current_step=3,
                   total_steps=3)
    high = make_run(user=user, name="high lr", status=RunStatus.SUCCEEDED, current_step=3, total_steps=3)
    broken = make_run(user=user, name="broken", status=RunStatus.FAILED)
    logged(low, {1: {"reward/mean": 0.1, "actor/kl": 0.3}, 2: {"reward/mean": 0.25, "actor/kl": 0.2},
                 3: {"reward/mean": 0.2, "actor/kl": 0.25}})
    logged(high, {1: {"reward/mean": 0.4, "actor/kl": 0.9}, 2: {"reward/mean": 0.123456789, "actor/kl": 0.5}})
    return low, high, broken


def test_rows_are_the_filtered_runs_with_their_metric_columns(runs, user) -> None:
    from policylab.tracking.selectors import HistoryQuery

    low, high, _ = runs
    query = HistoryQuery.from_params({"status": "succeeded", "metrics": "reward/mean,actor/kl:min", "sort": "-m0.best"})
    assert query.columns == (MetricColumn("reward/mean"), MetricColumn("actor/kl", "min"))
    header, *rows = list(history_csv_rows(query.runs(user), query.columns))
    assert header == ["run", "experiment", "status", "step", "total_steps", "duration_s", "created", "project", "tags",
                      "reward/mean (last)", "reward/mean (max)", "actor/kl (last)", "actor/kl (min)"]
    # by hand: high's best reward 0.4 > low's 0.25; last and best per column, the failed run filtered out
    assert [r[:5] for r in rows] == [[high.pk, "high lr", "succeeded", 3, 3], [low.pk, "low lr", "succeeded", 3, 3]]
    assert [r[9:] for r in rows] == [[0.123456789, 0.4, 0.5, 0.5], [0.2, 0.25, 0.25, 0.2]]
    assert rows[1][8] == "sweep,lr" and rows[1][7] == "proj"


def test_the_download_is_the_table_of_the_same_url(runs, user) -> None:
    browser = Client()
    browser.force_login(user)
    params = "?q=lr&metrics=reward/mean&sort=-m0.last"
    page = browser.get(f"/history/{params}").content.decode()
    link = urlsplit(unescape(re.search(r'id="history-csv"[^>]* href="([^"]+)"', page).group(1)))
    assert link.path == "/history/csv/" and parse_qs(link.query) == parse_qs(params[1:])  # the link carries the filters
    answer = browser.get(f"/history/csv/{params}&page=2")  # every page, whichever the table shows
    assert answer["Content-Type"].startswith("text/csv")
    assert 'filename="policylab-history.csv"' in answer["Content-Disposition"]
    header, *rows = list(csv.reader(io.StringIO(b"".join(answer.streaming_content).decode())))
    table = re.findall(r'<tr data-run="(\d+)">(.*?)</tr>', page, flags=re.S)
    assert [int(r[0]) for r in rows] == [int(run_id) for run_id, _ in table]  # same runs, same order
    for row, (_, cells) in zip(rows, table, strict=True):
        exact = re.findall(r'<td class="metric[^"]*" title="([^"]*)"', cells)
        assert row[9:] == exact  # last and best, as the table's cells hold them exactly
    assert header[9:] == ["reward/mean (last)", "reward/mean (max)"]
