"""Server-side downsampling of metric series so that a chart of a million points stays responsive."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def downsample_indices(xs: Sequence[float], ys: Sequence[float | None], max_points: int) -> list[int]:
    """Indices of the points to draw, in x order, at most `max_points` of them.

    The x range is cut into B = max_points // 4 buckets of equal width,
        bucket(x) = min(B - 1, floor((x - x_min) / (x_max - x_min) * B)),
    and each non-empty bucket keeps its first, last, minimum-y and maximum-y points (deduplicated).
    Spikes survive (min/max) and so does the line's shape at bucket edges (first/last).
    Points whose y is None or NaN are kept only as first/last (a gap in the line), never as min/max.
    `xs` must be sorted ascending; with at most `max_points` points every index is returned.
    """
    if max_points < 4:
        raise ValueError(f"max_points must be at least 4, got {max_points}")
    n = len(xs)
    if n != len(ys):
        raise ValueError(f"xs and ys differ in length ({n} != {len(ys)})")
    if n <= max_points:
        return list(range(n))
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)  # None becomes NaN
    n_buckets = max_points // 4
    span = x[-1] - x[0]
    if span <= 0:
        buckets = np.zeros(n, dtype=np.int64)
    else:
        buckets = np.minimum(n_buckets - 1, ((x - x[0]) / span * n_buckets).astype(np.int64))
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    ends = np.r_[starts[1:], n] - 1
    # NaN must never win min/max: replace it by ±inf so it loses both contests.
    y_for_min = np.where(np.isnan(y), np.inf, y)
    y_for_max = np.where(np.isnan(y), -np.inf, y)
    kept = [starts, ends]
    for values, pick in ((y_for_min, np.argmin), (y_for_max, np.argmax)):
        for lo, hi in zip(starts, ends, strict=True):
            segment = values[lo : hi + 1]
            if np.isfinite(segment).any():
                kept.append(np.array([lo + pick(segment)]))
    return np.unique(np.concatenate(kept)).tolist()
