"""How soon a waiter learns that a job ended: with the wake-up (a job's end NOTIFYs on
PostgreSQL, announces in-process on SQLite) against the poll alone, side by side.

    python bench/wait_latency.py [--postgres URL] [--rounds 50]

Printed per backend and mode, p50 / p95 in milliseconds:
- end → `ledger.wait`: from the handler returning (its result still to be committed) to
  `ledger.wait` returning the succeeded job, in another thread of the same process;
- HTTP submit → result: `tenure.Client.submit` then `Client.result` of a no-op job through a
  real server on loopback (uvicorn) and a worker in this process.
The poll alone is the same code with the waiter's wake-up switched off (its fallback poll:
50 ms, doubling to 1 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import tenure
from tenure.ledger.ended import EndedWatch


def _no_wakeup(job_id: str, callback: Callable[[], None]) -> Callable[[], None]:
    return lambda: None


def measure(url: str, rounds: int, wake: bool) -> tuple[list[float], list[float]]:
    app = tenure.App(url)
    returned: dict[str, float] = {}
    go = threading.Event()

    @app.job("noop")
    def noop(ctx: tenure.JobContext, payload: Any) -> None:
        if payload.get("hold"):
            go.wait(10)
        returned[ctx.job_id] = time.perf_counter()

    @app.job("quick")
    def quick(ctx: tenure.JobContext, payload: Any) -> None:
        return None

    from tests.support.service import LiveServer  # a real uvicorn server on loopback

    ledger = app.ledger
    watch = ledger._ended
    if not wake:
        watch.watch = _no_wakeup  # type: ignore[method-assign]
    key = ledger.operations.create_tenant("bench")
    end_to_wait: list[float] = []
    round_trip: list[float] = []
    with tenure.Worker(app, concurrency=4, poll_interval=0.05), LiveServer(ledger) as server:
        for _ in range(rounds):
            go.clear()
            job_id = ledger.submit("noop", {"hold": True})
            while ledger.get(job_id).state != "running":
                time.sleep(0.001)
            answered: dict[str, float] = {}

            def wait(job: str = job_id, into: dict[str, float] = answered) -> None:
                ledger.wait(job, timeout=10)
                into["at"] = time.perf_counter()

            waiter = threading.Thread(target=wait)
            waiter.start()
            while isinstance(watch, EndedWatch) and wake and watch.waiting() == 0:
                time.sleep(0.0005)
            time.sleep(0.05)  # the waiter is inside its wait, past its first read
            go.set()
            waiter.join(15)
            end_to_wait.append((answered["at"] - returned[job_id]) * 1000)
        with tenure.Client(server.url, key) as client:
            for _ in range(rounds):
                started = time.perf_counter()
                client.result(client.submit("quick", {}), timeout=10)
                round_trip.append((time.perf_counter() - started) * 1000)
    app.close()
    return end_to_wait, round_trip


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return f"{statistics.median(ordered):7.1f} / {p95:7.1f}"


def fresh_schema(url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute(f"CREATE SCHEMA {name}")
    option = quote(f"-csearch_path={name}", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={option}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("TENURE_TEST_POSTGRES_URL"))
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    heads = ("backend, mode", "end -> wait p50 / p95 ms", "submit -> result p50 / p95 ms")
    print(f"{heads[0]:32} {heads[1]:>26} {heads[2]:>30}")
    with tempfile.TemporaryDirectory() as folder:
        backends: list[tuple[str, Callable[[str], str]]] = [
            ("SQLite", lambda mode: f"sqlite:///{folder}/{mode}.db")
        ]
        if args.postgres:
            backends.append(
                ("PostgreSQL", lambda mode: fresh_schema(args.postgres, f"tenure_bench_{mode}"))
            )
        for name, url_of in backends:
            for mode, wake in (("poll", False), ("wake", True)):
                waits, trips = measure(url_of(mode), args.rounds, wake)
                label = f"{name}, {'wake-up' if wake else 'poll alone'}"
                print(f"{label:32} {percentiles(waits):>26} {percentiles(trips):>30}")
    if not args.postgres:
        print("PostgreSQL skipped (pass --postgres URL)")


if __name__ == "__main__":
    main()
