"""A small thread-safe latency histogram (Prometheus-style cumulative buckets), stdlib only."""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

DEFAULT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True, slots=True)
class LatencySnapshot:
    """Counts at one moment: `cumulative_buckets` pairs each upper bound ("+Inf" last) with
    how many observations were at most that long."""

    cumulative_buckets: list[tuple[str, float]]
    total_seconds: float
    count: int


class LatencyHistogram:
    """Observations in seconds, counted per bucket."""

    def __init__(self, buckets: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        self._bounds = tuple(sorted(buckets))
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        index = bisect.bisect_left(self._bounds, seconds)
        with self._lock:
            self._counts[index] += 1
            self._sum += seconds

    @property
    def count(self) -> int:
        """How many observations so far."""
        with self._lock:
            return sum(self._counts)

    def snapshot(self) -> LatencySnapshot:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip([*map(str, self._bounds), "+Inf"], counts, strict=True):
            running += n
            cumulative.append((bound, float(running)))
        return LatencySnapshot(cumulative, total, running)
