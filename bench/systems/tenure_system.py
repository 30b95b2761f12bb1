"""tenure, on PostgreSQL or SQLite, every guarantee on (tokens, guarded writes, events)."""

from __future__ import annotations

import functools
import os
import sqlite3
import statistics
import threading
import time
from typing import Any

import psycopg

import tenure
from bench.systems import deep
from bench.systems.common import (
    ProcessDrain,
    analyze,
    commits,
    cpu_seconds,
    latency_figures,
    server_cpu,
    server_cpu_since,
    transactions,
    wait_until,
)

BATCH = 500


def _app(url: str, **job_options: Any) -> tuple[tenure.App, dict[int, float]]:
    """An app with a no-op kind and a `probe` kind that records when its handler started."""
    app = tenure.App(url)
    started: dict[int, float] = {}

    @app.job("noop", **job_options)
    def noop(ctx: tenure.JobContext, payload: Any) -> None:
        return None

    @app.job("probe")
    def probe(ctx: tenure.JobContext, payload: Any) -> None:
        started[payload["i"]] = time.perf_counter()

    return app, started


def _is_postgres(url: str) -> bool:
    return url.startswith("postgres")


def enqueue_single(url: str, n: int, **_: Any) -> dict[str, Any]:
    """Jobs per second, one `submit` (one statement or transaction) each."""
    with tenure.connect(url) as ledger:
        begun = time.perf_counter()
        for i in range(n):
            ledger.submit("noop", {"i": i})
        elapsed = time.perf_counter() - begun
    return {"jobs_per_s": round(n / elapsed, 1), "jobs": n}


def enqueue_batch(url: str, n: int, **_: Any) -> dict[str, Any]:
    """Jobs per second through `submit_many`, BATCH at a time."""
    with tenure.connect(url) as ledger:
        begun = time.perf_counter()
        for start in range(0, n, BATCH):
            ledger.submit_many("noop", [{"i": i} for i in range(start, min(n, start + BATCH))])
        elapsed = time.perf_counter() - begun
    return {"jobs_per_s": round(n / elapsed, 1), "jobs": n, "batch": BATCH}


def drain(url: str, n: int, concurrency: int, **_: Any) -> dict[str, Any]:
    """Jobs per second from starting a worker until all `n` no-op jobs succeeded."""
    enqueue_batch(url, n)
    if _is_postgres(url):
        analyze(url)
    app, _started = _app(url)
    worker = tenure.Worker(app, concurrency=concurrency, kinds=["noop"])
    begun = time.perf_counter()
    worker.start()
    try:
        wait_until(lambda: worker.stats.get("succeeded", 0) >= n, 600, "drain")
        elapsed = time.perf_counter() - begun
        commits = worker.stats.get("commit_batches", 0)
    finally:
        worker.stop()
    return {
        "jobs_per_s": round(n / elapsed, 1),
        "jobs": n,
        "seconds": round(elapsed, 3),
        "complete_statements": commits,
    }


def latency(url: str, n: int, concurrency: int, pause: float, **_: Any) -> dict[str, Any]:
    """Enqueue → handler start with an idle worker, one job at a time, `pause` s apart."""
    app, started = _app(url)
    samples: list[float] = []
    with tenure.Worker(app, concurrency=concurrency, kinds=["probe"]) as worker:
        ledger = app.ledger
        time.sleep(0.5)  # let the worker reach its idle wait (and its LISTEN) first
        for i in range(n):
            sent = time.perf_counter()
            ledger.submit("probe", {"i": i})
            wait_until(functools.partial(started.__contains__, i), 30, f"probe {i}")
            samples.append((started[i] - sent) * 1000)
            wait_until(lambda: worker.running == 0, 30, "idle")
            time.sleep(pause)
        app.close()
    return latency_figures(samples)


def heartbeats(url: str, n: int, seconds: float, settle: float = 10.0, **_: Any) -> dict[str, Any]:
    """Statements per second while one worker holds `n` leases (heartbeat every 5 s)."""
    release = threading.Event()
    app = tenure.App(url)

    @app.job("hold", lease=30, heartbeat=5, jitter=5, stage_timeout=None)
    def hold(ctx: tenure.JobContext, payload: Any) -> None:
        release.wait(600)

    with tenure.connect(url) as ledger:
        for start in range(0, n, BATCH):
            ledger.submit_many("hold", [{}] * min(BATCH, n - start))
    worker = tenure.Worker(app, concurrency=n, kinds=["hold"])
    worker.start()
    try:
        wait_until(lambda: worker.running >= n, 300, f"{n} leases held")
        # --quick claims its leases in one or two statements: they renew together at once.
        settled = _renewals_settle(worker, n, settle) if settle else None
        before = _statement_count(url, worker)
        renewals_before = worker.stats.get("renewal_batches", 0)
        beats_before = worker.stats.get("heartbeats", 0)
        time.sleep(seconds)
        after = _statement_count(url, worker)
        renewals = worker.stats.get("renewal_batches", 0) - renewals_before
        beats = worker.stats.get("heartbeats", 0) - beats_before
    finally:
        release.set()
        worker.stop(grace=60)
    return {
        "leases": n,
        "window_s": seconds,
        "statements_per_s": round((after - before) / seconds, 2),
        "renewal_statements_per_s": round(renewals / seconds, 2),
        "heartbeat_interval_s": 5,
        "lease_renewals": beats,
        "settled_after_s": settled,
    }


def _renewals_settle(worker: tenure.Worker, n: int, timeout: float) -> float | None:
    """Wait until one renewal statement renews all `n` leases: leases claimed over a few
    seconds are first renewed in several batches, which merge within a few heartbeats (leases
    due within a quarter heartbeat go together). Seconds waited, or None at `timeout`."""
    began = time.monotonic()
    # A batch is counted before its statement and its renewals after: look two polls back.
    stats = worker.stats
    batches = [stats.get("renewal_batches", 0)] * 2
    beats = stats.get("heartbeats", 0)
    while time.monotonic() - began < timeout:
        time.sleep(0.02)
        stats = worker.stats
        one_batch = stats.get("renewal_batches", 0) - batches[0] <= 1
        if one_batch and stats.get("heartbeats", 0) - beats >= n:
            return round(time.monotonic() - began, 1)
        batches = [batches[1], stats.get("renewal_batches", 0)]
        beats = stats.get("heartbeats", 0)
    return None


def _statement_count(url: str, worker: tenure.Worker) -> int:
    if _is_postgres(url):
        return transactions(url)
    # SQLite: every write the worker makes is a batch of its renewer (nothing else runs).
    return int(worker.stats.get("renewal_batches", 0))


def claim_cost(url: str, history: int, **_: Any) -> dict[str, Any]:
    """Median time of one claim (one job) with `history` finished jobs in the tables."""
    with tenure.connect(url) as ledger:
        _add_history(url, history)
        ledger.submit_many("noop", [{}] * 400)
        if _is_postgres(url):
            analyze(url)
        times = []
        for _round in range(300):
            begun = time.perf_counter()
            lease = ledger.claim("bench", kinds=["noop"], lease_seconds=60)
            times.append((time.perf_counter() - begun) * 1000)
            assert lease is not None
            ledger.complete(lease, None)
    return {
        "history_rows": history,
        "claim_p50_ms": round(statistics.median(times), 3),
        "claim_mean_ms": round(statistics.fmean(times), 3),
    }


def _add_history(url: str, rows: int) -> None:
    """`rows` succeeded jobs with three events each, written directly (fast)."""
    if _is_postgres(url):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                """
                INSERT INTO tenure_jobs (id, kind, state, fencing_token, attempt, max_attempts,
                    payload, payload_sha256, result, run_after, created_at, updated_at)
                SELECT gen_random_uuid(), 'noop', 'succeeded', 1, 1, 5, '{}', 'x', 'null',
                       now(), now(), now()
                FROM generate_series(1, %(rows)s)
                """,
                {"rows": rows},
            )
            conn.execute(
                """
                INSERT INTO tenure_events (job_id, type, at, token, detail)
                SELECT id, t, now(), 1, '{}' FROM tenure_jobs,
                       unnest(ARRAY['job_submitted', 'job_claimed', 'job_succeeded']) AS t
                WHERE state = 'succeeded'
                """
            )
        return
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute(
            """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?),
            clock(now) AS (SELECT CAST(strftime('%s', 'now') AS REAL))
            INSERT INTO tenure_jobs (id, kind, state, fencing_token, attempt, max_attempts,
                payload, payload_sha256, result, run_after, created_at, updated_at)
            SELECT lower(hex(randomblob(16))), 'noop', 'succeeded', 1, 1, 5, '{}', 'x', 'null',
                   clock.now, clock.now, clock.now
            FROM n, clock
            """,
            (rows,),
        )
        conn.execute(
            """
            INSERT INTO tenure_events (job_id, type, at, token, detail)
            SELECT tenure_jobs.id, t.value, CAST(strftime('%s', 'now') AS REAL), 1, '{}'
            FROM tenure_jobs,
                   json_each('["job_submitted","job_claimed","job_succeeded"]') AS t
            WHERE state = 'succeeded'
            """
        )


def failover(url: str, **_: Any) -> dict[str, Any]:
    """SIGKILL of a worker process holding a job (lease 1 s) → another worker's handler."""
    from bench.failover import measure

    return measure(url, "short_class")


def fairness(url: str, n: int, processes: int, **_: Any) -> dict[str, Any]:
    """`processes` worker processes drain `n` no-op jobs from one database: each one's share."""
    import signal
    import tempfile
    from collections import Counter
    from pathlib import Path

    from tenure.testing.process import spawn_worker, wait_started

    root = Path(__file__).resolve().parents[2]
    folder = Path(tempfile.mkdtemp())
    procs = []
    with tenure.connect(url) as ledger:
        try:
            for number in range(processes):
                log = folder / f"worker-{number}.log"
                proc = spawn_worker(
                    "bench.failover_app:app",
                    url,
                    log,
                    "--concurrency",
                    "4",
                    "--kinds",
                    "tick",
                    "--poll",
                    "0.05",
                    cwd=root,
                    env={"PYTHONPATH": str(root)},
                )
                procs.append(proc)
                wait_started(proc, log)
            ids: list[str] = []
            begun = time.perf_counter()
            for start in range(0, n, BATCH):
                ids += ledger.submit_many("tick", [{}] * min(BATCH, n - start))
            wait_until(
                lambda: ledger.operations.counts(kind="tick")[tenure.JobState.SUCCEEDED] >= n,
                300,
                "fairness drain",
            )
            elapsed = time.perf_counter() - begun
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(60)
        owners = Counter(ledger.get(job_id).owner_id for job_id in ids)
    shares = sorted(round(count / n, 3) for count in owners.values())
    return {
        "processes": processes,
        "jobs": n,
        "shares": shares,
        "min_share": shares[0] if len(shares) == processes else 0.0,
        "jobs_per_s": round(n / elapsed, 1),
    }


def drain_processes(url: str, n: int, concurrency: int, processes: int, **_: Any) -> dict[str, Any]:
    """`processes` `tenure worker` processes as users run them (default settings: log level
    info, JSON lines on stderr, here a file), started together on `n` queued no-op jobs.
    Jobs per second from the first claim to the last end by the database's clock (start-up
    is not in it); the workers' CPU (user + sys) and the database's commits per job."""
    import signal
    import tempfile
    from pathlib import Path

    from tenure.testing.process import spawn_worker, wait_started

    root = Path(__file__).resolve().parents[2]
    folder = Path(tempfile.mkdtemp(prefix="tenure-drain-"))
    enqueue_batch(url, n)
    if _is_postgres(url):
        analyze(url)
    commits_before = commits(url) if _is_postgres(url) else None
    path = os.pathsep.join([str(root), str(root / "src")])  # this checkout's tenure
    args = ("--concurrency", str(concurrency), "--kinds", "noop")
    logs = [folder / f"worker-{number}.log" for number in range(processes)]
    env = {"PYTHONPATH": path}
    procs = [spawn_worker("bench.noop_app:app", url, log, *args, cwd=root, env=env) for log in logs]
    try:
        started = []  # each one's CPU once it has started (its imports are not the drain's)
        for proc, log in zip(procs, logs, strict=True):
            wait_started(proc, log)
            started.append(cpu_seconds(proc.pid))
        server_before = server_cpu()
        with tenure.connect(url) as ledger:
            polls = _wait_drained(ledger, n)
        cpu = sum(cpu_seconds(p.pid) for p in procs) - sum(started)
        server = server_cpu_since(server_before) if _is_postgres(url) else None
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(60)
    spent = None
    if commits_before is not None:  # read once the workers' sessions ended and were counted
        time.sleep(0.5)
        spent = commits(url) - commits_before - polls - 1  # less our own reads
    return ProcessDrain(n, processes, _drain_window(url), cpu, spent, server).figures()


def _wait_drained(ledger: tenure.Ledger, n: int) -> int:
    """Poll (every 50 ms) until `n` jobs succeeded; how many polls that took."""
    polls = 0
    deadline = time.monotonic() + 600
    while ledger.operations.counts(kind="noop")[tenure.JobState.SUCCEEDED] < n:
        polls += 1
        if time.monotonic() > deadline:
            raise TimeoutError("drain: not within 600s")
        time.sleep(0.05)
    return polls + 1


def _drain_window(url: str) -> float:
    """Seconds from the first claim to the last job's end, by the database's clock."""
    first = "SELECT min(at) FROM tenure_events WHERE type = 'job_claimed'"
    last = "SELECT max(updated_at) FROM tenure_jobs WHERE state = 'succeeded'"
    if _is_postgres(url):
        with psycopg.connect(url, autocommit=True) as conn:
            began = conn.execute(first).fetchone()[0]  # type: ignore[index]
            ended = conn.execute(last).fetchone()[0]  # type: ignore[index]
        return float((ended - began).total_seconds())
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        began = conn.execute(first).fetchone()[0]
        ended = conn.execute(last).fetchone()[0]
    return float(ended - began)


def _produce(url: str, shared: deep.Shared, depth: int) -> None:
    with tenure.connect(url) as ledger:
        for size in deep.batches(shared, depth):
            ledger.submit_many("noop", [{} for _ in range(size)])


def deep_queue(url: str, concurrency: int, depth: int, phase: float, **_: Any) -> dict[str, Any]:
    """`depth` no-op jobs kept queued while one worker runs them (bench/systems/deep.py)."""
    shared = deep.Shared()
    with tenure.connect(url):  # the schema, before the producer and the worker race for it
        pass
    producer = deep.start_producer(_produce, url, shared, depth)
    deep.wait_filled(shared, depth)
    completions = deep.Completions(shared)
    app = tenure.App(url)

    @app.job("noop")
    def noop(ctx: tenure.JobContext, payload: Any) -> None:
        completions.done()

    worker = tenure.Worker(app, concurrency=concurrency, kinds=["noop"])
    worker.start()
    try:
        return deep.measure(url, shared, completions, phase, producer)
    finally:
        shared.stop.set()
        worker.stop()
        app.close()
        producer.join(30)
