"""The deep queue, shared by every system: a producer process keeps `depth` jobs queued ahead
of the workers while they run, first with a clean horizon, then with one session idle in a
transaction; per phase, jobs run per second and the dead tuples left in the system's tables.

A system's `deep_queue(url, concurrency, depth, phase)` forks its producer (`start_producer`,
which submits the sizes `batches` gives), starts its own workers with a handler that calls
`Completions.done()`, and hands both to `measure`.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import psycopg

BATCH = 500
SAMPLE_EVERY = 1.0  # seconds between readings of pg_stat_user_tables
_FORK = multiprocessing.get_context("fork")


@dataclass
class Shared:
    """What the producer process and the measuring process share."""

    completed: Synchronized[int] = field(default_factory=lambda: _FORK.Value("q", 0))
    submitted: Synchronized[int] = field(default_factory=lambda: _FORK.Value("q", 0))
    stop: Any = field(default_factory=_FORK.Event)
    parent: int = field(default_factory=os.getpid)


def batches(shared: Shared, depth: int) -> Iterator[int]:
    """Sizes of the batches a producer submits to keep `depth` jobs ahead of the completed
    ones, until told to stop or the measuring process is gone (killed at a timeout: the
    producer must not outlive it). A batch counts as submitted when the producer asks for the
    next one: it is in by then. The producer is the one writer of `submitted`."""
    while not shared.stop.is_set() and os.getppid() == shared.parent:
        wanted = shared.completed.value + depth - shared.submitted.value
        if wanted <= 0:
            time.sleep(0.002)
            continue
        size = min(BATCH, wanted)
        yield size
        shared.submitted.value += size


def start_producer(target: Callable[..., None], *args: Any) -> Any:
    """Fork the producer before the measuring process opens connections or threads."""
    process = _FORK.Process(target=target, args=args, daemon=True)
    process.start()
    return process


class Completions:
    """Jobs the workers of this process ran, counted under a lock (handlers run on many
    threads) and copied to the shared counter every 5 ms for the producer."""

    def __init__(self, shared: Shared) -> None:
        self._shared = shared
        self._lock = threading.Lock()
        self.count = 0
        self._publisher = threading.Thread(target=self._publish, daemon=True)
        self._publisher.start()

    def done(self) -> None:
        with self._lock:
            self.count += 1

    def _publish(self) -> None:
        while not self._shared.stop.is_set():
            self._shared.completed.value = self.count
            time.sleep(0.005)


def _dead_tuples(conn: psycopg.Connection[Any]) -> dict[str, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT schemaname || '.' || relname, n_dead_tup FROM pg_stat_user_tables"
    ).fetchall()
    return {str(name): int(dead) for name, dead in rows}


def measure(
    url: str, shared: Shared, completions: Completions, phase: float, producer: Any
) -> dict[str, Any]:
    """Run a clean phase, then a phase with a session idle in a transaction, `phase` seconds
    each, and return per phase: jobs per second, the median and last sum of dead tuples over
    the system's tables, the three tables with the most at the end, and the fewest jobs seen
    queued ahead (a producer that fell behind shows there). Raises if the producer died or the
    server ended the idle transaction (`idle_in_transaction_session_timeout`)."""
    figures: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as stats:
        for name in ("clean", "held"):
            holder = psycopg.connect(url) if name == "held" else None
            try:
                if holder is not None:
                    # An xid of its own, running until the phase ends: it holds the horizon.
                    holder.execute("SELECT txid_current()")
                began, ran_before = time.monotonic(), completions.count
                sums: list[int] = []
                dead: dict[str, int] = {}
                ahead = shared.submitted.value - completions.count
                while time.monotonic() - began < phase:
                    time.sleep(SAMPLE_EVERY)
                    dead = _dead_tuples(stats)
                    sums.append(sum(dead.values()))
                    ahead = min(ahead, shared.submitted.value - completions.count)
                elapsed = time.monotonic() - began
                ran = completions.count - ran_before
                if not producer.is_alive():
                    raise RuntimeError(f"the producer died during the {name} phase")
                if holder is not None:
                    holder.execute("SELECT 1")  # raises if the server ended the transaction
            finally:
                if holder is not None:
                    holder.close()
            top = sorted(dead.items(), key=lambda item: -item[1])[:3]
            figures[name] = {
                "jobs_per_s": round(ran / elapsed, 1),
                "dead_tuples_median": int(statistics.median(sums)),
                "dead_tuples_end": sums[-1],
                "dead_by_table_end": dict(top),
                "fewest_queued_ahead": ahead,
            }
    return figures


def wait_filled(shared: Shared, depth: int, timeout: float = 120.0) -> None:
    """Until the producer has queued the first `depth` jobs."""
    deadline = time.monotonic() + timeout
    while shared.submitted.value < depth:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the producer queued {shared.submitted.value} of {depth} jobs")
        time.sleep(0.01)
