"""Count what each ledger operation costs: SQL statements, and round trips on PostgreSQL.

    python bench/statements.py [--postgres URL] [--repeat N]

SQLite: statements counted by sqlite3's trace callback (all in-process; one fsync per commit).
PostgreSQL: libpq's protocol trace of the one pooled connection; a round trip is one Sync (or
simple Query) the client sends and waits for. Median wall time per operation is printed too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tenure
from tenure.ledger import lease_port
from tenure.wait_state import WaitFor
from tenure.waits import WaitRequest

Op = tuple[str, Callable[[tenure.Ledger, dict[str, Any]], Any]]


def operations() -> list[Op]:
    def submit(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ctx["job"] = ledger.submit(
            "k", {"n": time.monotonic_ns()}, idempotency_key=str(time.monotonic_ns())
        )

    def submit_repeat(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.submit("k", {"n": 1}, idempotency_key="same")

    def claim(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ctx["lease"] = ledger.claim("w", lease_seconds=60)

    def claim_empty(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.claim("w", kinds=["none"], lease_seconds=60)

    def extend(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.extend(ctx["lease"])

    def extend_many_10(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        lease_port(ledger).extend_many(ctx["ten"])

    def submit_many_10(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.submit_many("k", [{"n": n} for n in range(10)])

    def complete_many_10(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        lease_port(ledger).complete_many([(lease, {"r": 1}) for lease in ctx["ten"]])

    def complete_and_claim_10(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        lease_port(ledger).complete_and_claim(
            [(lease, {"r": 1}) for lease in ctx["ten"]], "w", limit=10, lease_seconds=60
        )

    def save_step(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.save_step(ctx["lease"], 1, {"c": 1})

    def complete(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.complete(ctx["lease"], {"r": 1})

    def complete_stale(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        with contextlib.suppress(tenure.LeaseLost):
            ledger.complete(ctx["lease"], {"r": 2})

    def get(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.get(ctx["job"])

    def cancel(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.cancel(ctx["job"])

    def requeue(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.requeue(ctx["job"])

    def list_100(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.list(limit=100)

    def events(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.events(ctx["job"])

    def signal(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.signal(ctx["job"], "go", {"ok": True})

    def wait(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        request = WaitRequest(0, "signal:go", WaitFor.SIGNAL, signals=("go",))
        lease_port(ledger).wait_on(ctx["lease"], request)

    def spawn(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        lease_port(ledger).spawn(ctx["lease"], "child", "k", {"n": 1})

    def children(ledger: tenure.Ledger, ctx: dict[str, Any]) -> None:
        ledger.children(ctx["job"])

    return [
        ("submit", submit),
        ("submit (repeated key)", submit_repeat),
        ("claim", claim),
        ("claim (nothing due)", claim_empty),
        ("extend", extend),
        ("extend_many (10 leases)", extend_many_10),
        ("submit_many (10 jobs)", submit_many_10),
        ("complete_many (10 leases)", complete_many_10),
        ("complete_and_claim (10 + 10)", complete_and_claim_10),
        ("save_step", save_step),
        ("complete", complete),
        ("complete (stale: rejected)", complete_stale),
        ("get", get),
        ("cancel", cancel),
        ("requeue", requeue),
        ("list (100)", list_100),
        ("events", events),
        ("signal", signal),
        ("signal (repeat: answered)", signal),
        ("wait (suspends)", wait),
        ("wait (signal was there)", wait),
        ("spawn (child submit+event)", spawn),
        ("children", children),
    ]


class Counter:
    def __init__(self) -> None:
        self.statements = 0
        self.round_trips = 0


def sqlite_counter(ledger: tenure.Ledger) -> Counter:
    counter = Counter()

    def trace(sql: str) -> None:
        counter.statements += 1

    # One thread: the pool hands the same idle connection back every time.
    with ledger._store._conn() as conn:  # type: ignore[attr-defined]
        conn.set_trace_callback(trace)
    return counter


def postgres_counter(ledger: tenure.Ledger, trace_file: Path) -> tuple[Counter, Any]:
    pool = ledger._store._pool  # type: ignore[attr-defined]
    conn = pool.getconn()
    handle = open(trace_file, "w")  # noqa: SIM115 - closed by the caller
    conn.pgconn.trace(handle.fileno())
    conn.pgconn.set_trace_flags(0)
    pool.putconn(conn)
    return Counter(), handle


def count_postgres(trace_file: Path, start: int) -> tuple[int, int, int]:
    text = trace_file.read_text()[start:]
    statements = sum(
        1
        for line in text.splitlines()
        if "\tF\t" in line
        and (
            "\tParse\t" in line
            or "\tQuery\t" in line
            or ("\tBind\t" in line and "\tParse\t" not in line)
        )
    )
    syncs = sum(
        1
        for line in text.splitlines()
        if "\tF\t" in line and ("\tSync" in line or "\tQuery\t" in line)
    )
    binds = sum(1 for line in text.splitlines() if "\tF\t" in line and "\tBind\t" in line)
    queries = sum(1 for line in text.splitlines() if "\tF\t" in line and "\tQuery\t" in line)
    return binds + queries, syncs, statements


def measure(url: str, repeat: int, name: str) -> None:
    print(f"\n{name}: {url.rsplit('@', maxsplit=1)[-1]}")
    print(f"{'operation':28} {'statements':>10} {'round trips':>12} {'median ms':>10}")
    trace_file = Path(tempfile.mkdtemp()) / "libpq.trace"
    ledger = tenure.connect(url, pool_size=1)
    is_pg = url.startswith("postgres")
    handle = None
    if is_pg:
        counter, handle = postgres_counter(ledger, trace_file)
    else:
        counter = sqlite_counter(ledger)
    try:
        for label, op in operations():
            times = []
            stmts = trips = 0
            for i in range(repeat):
                ctx: dict[str, Any] = {}
                _prepare(ledger, label, ctx)
                if handle is not None:
                    handle.flush()
                    offset = len(trace_file.read_text())
                counter.statements = 0
                started = time.perf_counter()
                op(ledger, ctx)
                times.append((time.perf_counter() - started) * 1000)
                if handle is not None:
                    handle.flush()
                    stmts_i, trips_i, _ = count_postgres(trace_file, offset)
                else:
                    stmts_i, trips_i = counter.statements, 0
                if i == repeat - 1:
                    stmts, trips = stmts_i, trips_i
            shown_trips = str(trips) if is_pg else "in-process"
            print(f"{label:28} {stmts:>10} {shown_trips:>12} {statistics.median(times):>10.3f}")
    finally:
        ledger.close()
        if handle is not None:
            handle.close()


def _prepare(ledger: tenure.Ledger, label: str, ctx: dict[str, Any]) -> None:
    """Set up what an operation needs, outside the measured region."""
    ctx["job"] = ledger.submit("k", {"p": time.monotonic_ns()})
    if label in {
        "extend",
        "save_step",
        "complete",
        "complete (stale: rejected)",
        "wait (suspends)",
        "wait (signal was there)",
        "spawn (child submit+event)",
    }:
        ctx["lease"] = ledger.claim("w", lease_seconds=60)
        if label == "complete (stale: rejected)":
            ledger.cancel(ctx["lease"].job_id)
    if label in {
        "extend_many (10 leases)",
        "complete_many (10 leases)",
        "complete_and_claim (10 + 10)",
    }:
        for _ in range(10):
            ledger.submit("k", {"p": time.monotonic_ns()})
        ctx["ten"] = lease_port(ledger).claim_many("w", limit=10, lease_seconds=60)
    if label == "wait (signal was there)":
        ledger.signal(ctx["lease"].job_id, "go", {"ok": True})
    if label == "signal (repeat: answered)":
        ledger.signal(ctx["job"], "go", {"ok": True})
    if label == "requeue":
        ledger.cancel(ctx["job"])
    if label == "submit (repeated key)":
        ledger.submit("k", {"n": 1}, idempotency_key="same")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--postgres", default=os.environ.get("TENURE_TEST_POSTGRES_URL"))
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    measure(f"sqlite:///{folder}/bench.db", args.repeat, "SQLite (WAL, synchronous=FULL)")
    if args.postgres:
        measure(args.postgres, args.repeat, "PostgreSQL")
    else:
        print("\n(no --postgres URL: PostgreSQL skipped)")


if __name__ == "__main__":
    main()
