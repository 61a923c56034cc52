import math
import time

import numpy as np
import pytest

from policylab.tracking.downsampling import downsample_indices


def test_small_series_are_returned_whole() -> None:
    assert downsample_indices([0, 1, 2], [5.0, 6.0, 7.0], 8) == [0, 1, 2]


def test_keeps_first_last_and_spikes_within_budget() -> None:
    n = 100_000
    xs = list(range(n))
    ys = [math.sin(i / 500) for i in xs]
    ys[31_337] = 50.0  # a spike a naive stride would drop
    ys[77_777] = -50.0
    kept = downsample_indices(xs, ys, 400)
    assert len(kept) <= 400
    assert kept == sorted(set(kept))
    assert kept[0] == 0 and kept[-1] == n - 1
    assert 31_337 in kept and 77_777 in kept


def test_each_bucket_keeps_its_extremes() -> None:
    rng = np.random.default_rng(0)
    xs = np.sort(rng.uniform(0, 1000, 5000)).tolist()
    ys = rng.normal(size=5000).tolist()
    kept = set(downsample_indices(xs, ys, 40))  # 10 buckets of width 100
    for b in range(10):
        members = [i for i, x in enumerate(xs) if min(9, int((x - xs[0]) / (xs[-1] - xs[0]) * 10)) == b]
        if members:
            assert max(members, key=lambda i: ys[i]) in kept
            assert min(members, key=lambda i: ys[i]) in kept


def test_missing_values_never_win_min_or_max() -> None:
    xs = list(range(1000))
    ys = [None if i % 2 else float(i % 7) for i in xs]
    ys[500] = float("nan")
    kept = downsample_indices(xs, ys, 8)  # two buckets: 0..499 and 500..999
    edges = {0, 499, 500, 999}
    inner = [ys[i] for i in kept if i not in edges]
    assert all(v is not None and not math.isnan(v) for v in inner)
    for half in (range(0, 500), range(500, 1000)):
        assert {0.0, 6.0} <= {ys[i] for i in kept if i in half}


def test_a_million_points_downsample_fast() -> None:
    xs = np.arange(1_000_000, dtype=float)
    ys = np.cumsum(np.random.default_rng(1).normal(size=1_000_000))
    start = time.perf_counter()
    kept = downsample_indices(xs, ys, 2000)
    assert time.perf_counter() - start < 2.0
    assert 1000 < len(kept) <= 2000
    assert ys[kept].max() == ys.max() and ys[kept].min() == ys.min()


def test_rejects_a_budget_below_one_bucket() -> None:
    with pytest.raises(ValueError, match="max_points must be at least 4"):
        downsample_indices([0, 1], [0, 1], 2)
