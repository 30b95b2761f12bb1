"""PgQueuer 1.6 (PyPI) on its asyncpg driver (the one its documentation leads with), async
no-op entrypoints, LISTEN/NOTIFY on."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, Queries, QueueManager
from pgqueuer.domain.types import QueueExecutionMode

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
ROOT = Path(__file__).resolve().parents[2]


async def _connect(url: str) -> tuple[asyncpg.Connection, Queries]:
    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    return conn, queries


async def _installed(url: str) -> tuple[asyncpg.Connection, Queries]:
    conn, queries = await _connect(url)
    if not await queries.schema_is_installed():
        await queries.install()
    return conn, queries


def _batch_size(concurrency: int) -> int:
    # PgQueuer requires max_concurrent_tasks >= 2 x batch_size.
    return max(1, concurrency // 2)


def enqueue_single(url: str, n: int, **_: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        conn, queries = await _installed(url)
        begun = time.perf_counter()
        for i in range(n):
            await queries.enqueue("noop", str(i).encode())
        elapsed = time.perf_counter() - begun
        await conn.close()
        return {"jobs_per_s": round(n / elapsed, 1), "jobs": n}

    return asyncio.run(go())


async def _enqueue_batch(queries: Queries, name: str, n: int) -> float:
    begun = time.perf_counter()
    for start in range(0, n, BATCH):
        size = min(BATCH, n - start)
        await queries.enqueue([name] * size, [str(i).encode() for i in range(size)], [0] * size)
    return time.perf_counter() - begun


def enqueue_batch(url: str, n: int, **_: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        conn, queries = await _installed(url)
        elapsed = await _enqueue_batch(queries, "noop", n)
        await conn.close()
        return {"jobs_per_s": round(n / elapsed, 1), "jobs": n, "batch": BATCH}

    return asyncio.run(go())


def drain(url: str, n: int, concurrency: int, **_: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        conn, queries = await _installed(url)
        await _enqueue_batch(queries, "noop", n)
        analyze(url)
        done = 0

        qm = QueueManager(queries)

        @qm.entrypoint("noop")
        async def noop(job: Any) -> None:
            nonlocal done
            done += 1

        begun = time.perf_counter()
        await qm.run(
            batch_size=_batch_size(concurrency),
            max_concurrent_tasks=concurrency,
            mode=QueueExecutionMode.drain,
        )
        elapsed = time.perf_counter() - begun
        await conn.close()
        if done != n:
            raise RuntimeError(f"pgqueuer drained {done} of {n} jobs")
        return {"jobs_per_s": round(n / elapsed, 1), "jobs": n, "seconds": round(elapsed, 3)}

    return asyncio.run(go())


def latency(url: str, n: int, concurrency: int, pause: float, **_: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        conn, queries = await _installed(url)
        producer, producer_queries = await _connect(url)
        started: dict[int, float] = {}
        qm = QueueManager(queries)

        @qm.entrypoint("probe")
        async def probe(job: Any) -> None:
            started[int(job.payload)] = time.perf_counter()

        worker = asyncio.create_task(
            qm.run(batch_size=_batch_size(concurrency), max_concurrent_tasks=concurrency)
        )
        await asyncio.sleep(0.5)
        samples: list[float] = []
        for i in range(n):
            sent = time.perf_counter()
            await producer_queries.enqueue("probe", str(i).encode())
            while i not in started:
                await asyncio.sleep(0.0005)
            samples.append((started[i] - sent) * 1000)
            await asyncio.sleep(pause)
        qm.shutdown.set()
        await worker
        await producer.close()
        await conn.close()
        return latency_figures(samples)

    return asyncio.run(go())


def heartbeats(url: str, n: int, seconds: float, **_: Any) -> dict[str, Any]:
    """PgQueuer heartbeats the jobs it holds every heartbeat_timeout / 2 (5 s here)."""

    async def go() -> dict[str, Any]:
        conn, queries = await _installed(url)
        await _enqueue_batch(queries, "hold", n)
        release = asyncio.Event()
        held = 0
        qm = QueueManager(queries)

        @qm.entrypoint("hold")
        async def hold(job: Any) -> None:
            nonlocal held
            held += 1
            await release.wait()

        worker = asyncio.create_task(
            qm.run(
                batch_size=_batch_size(n),
                max_concurrent_tasks=n,
                heartbeat_timeout=timedelta(seconds=10),
            )
        )
        deadline = time.monotonic() + 300
        while held < n and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        before = await asyncio.to_thread(transactions, url)
        await asyncio.sleep(seconds)
        after = await asyncio.to_thread(transactions, url)
        release.set()
        qm.shutdown.set()
        await worker
        await conn.close()
        return {
            "leases": held,
            "window_s": seconds,
            "statements_per_s": round((after - before) / seconds, 2),
            "heartbeat_interval_s": 5,
        }

    return asyncio.run(go())


def hold_worker(url: str, folder: str, **_: Any) -> dict[str, Any]:
    """A worker process for `failover`: announces each job it starts, then holds it."""

    async def go() -> None:
        conn, queries = await _connect(url)
        qm = QueueManager(queries)

        @qm.entrypoint("hold")
        async def hold(job: Any) -> None:
            (Path(folder) / f"started-{os.getpid()}").write_text(str(job.id))
            await asyncio.sleep(3600)

        (Path(folder) / f"ready-{os.getpid()}").write_text("")
        # Stale jobs are re-picked by a dequeue; a standby only dequeues on a notification or
        # every dequeue_timeout (30 s by default): 1 s here, as generous as tenure's short lease.
        await qm.run(
            batch_size=1,
            heartbeat_timeout=timedelta(seconds=1),
            dequeue_timeout=timedelta(seconds=1),
        )
        await conn.close()

    asyncio.run(go())
    return {}


def failover(url: str, **_: Any) -> dict[str, Any]:
    """SIGKILL of the worker holding a job → the standby's handler, heartbeat_timeout 1 s."""

    async def setup() -> None:
        conn, queries = await _installed(url)
        await queries.enqueue("hold", None)
        await conn.close()

    asyncio.run(setup())
    folder = Path(tempfile.mkdtemp())

    def start() -> subprocess.Popen[bytes]:
        args = json.dumps({"url": url, "folder": str(folder)})
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.systems", "pgqueuer", "hold_worker", args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until((folder / f"ready-{proc.pid}").exists, 60, "pgqueuer worker")
        return proc

    first = start()
    wait_until((folder / f"started-{first.pid}").exists, 60, "first worker's job")
    standby = start()
    killed = time.monotonic()
    first.send_signal(signal.SIGKILL)
    first.wait()
    try:
        wait_until((folder / f"started-{standby.pid}").exists, 120, "standby's job")
        resumed = time.monotonic() - killed
    finally:
        standby.kill()
        standby.wait()
    return {
        "heartbeat_timeout_s": 1.0,
        "dequeue_timeout_s": 1.0,
        "kill_to_handler_s": round(resumed, 3),
    }


def claim_cost(url: str, history: int, **_: Any) -> dict[str, Any]:
    return {"unsupported": "not measured (tenure's own target)"}


def drain_worker(url: str, concurrency: int, batch: int, folder: str, **_: Any) -> dict[str, Any]:
    """One PgQueuer worker process: `max_concurrent_tasks` the common concurrency, batch as
    given, the rest its defaults."""

    async def go() -> None:
        conn, queries = await _connect(url)
        qm = QueueManager(queries)

        @qm.entrypoint("noop")
        async def noop(job: Any) -> None:
            return None

        (Path(folder) / f"ready-{os.getpid()}").write_text("")
        await qm.run(batch_size=batch, max_concurrent_tasks=concurrency)
        await conn.close()

    asyncio.run(go())
    return {}


def drain_processes(
    url: str, n: int, concurrency: int, processes: int, batch: int | None = None, **_: Any
) -> dict[str, Any]:
    """`processes` PgQueuer worker processes started together on `n` queued no-op jobs: jobs
    per second from the first pick to the last success (its log table, the database's clock;
    start-up is not in it), the workers' CPU and the database's commits per job. The batch is
    the largest its concurrency cap allows (half of it: 16 for 32; its default is 10)."""
    batch = batch or _batch_size(concurrency)

    async def setup() -> None:
        conn, queries = await _installed(url)
        await _enqueue_batch(queries, "noop", n)
        await conn.close()

    asyncio.run(setup())
    analyze(url)
    commits_before = commits(url)
    folder = Path(tempfile.mkdtemp(prefix="pgqueuer-drain-"))
    args = {"url": url, "concurrency": concurrency, "batch": batch, "folder": str(folder)}
    command = [sys.executable, "-m", "bench.systems", "pgqueuer", "drain_worker", json.dumps(args)]
    procs = [
        subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    try:
        started = []  # each one's CPU once it is connected (its imports are not the drain's)
        for proc in procs:
            wait_until((folder / f"ready-{proc.pid}").exists, 60, "pgqueuer worker")
            started.append(cpu_seconds(proc.pid))
        server_before = server_cpu()
        polls = _wait_drained(url, n)
        cpu = sum(cpu_seconds(p.pid) for p in procs) - sum(started)
        server = server_cpu_since(server_before)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    time.sleep(0.5)  # the killed sessions' statistics reach pg_stat_database as they end
    spent = commits(url) - commits_before - polls - 1
    figures = ProcessDrain(n, processes, _drain_window(url), cpu, spent, server).figures()
    return {**figures, "batch": batch}


async def _schema_only(url: str) -> None:
    conn, _ = await _installed(url)
    await conn.close()


def _wait_drained(url: str, n: int) -> int:
    """Poll (every 50 ms) until `n` successes are logged; how many polls that took."""
    import psycopg

    polls = 0
    deadline = time.monotonic() + 600
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            polls += 1
            row = conn.execute(
                "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
            ).fetchone()
            if row is not None and row[0] >= n:
                return polls
            if time.monotonic() > deadline:
                raise TimeoutError("drain: not within 600s")
            time.sleep(0.05)


def _drain_window(url: str) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT min(created) FILTER (WHERE status = 'picked'), "
            "max(created) FILTER (WHERE status = 'successful') FROM pgqueuer_log"
        ).fetchone()
    assert row is not None
    return float((row[1] - row[0]).total_seconds())


def _produce(url: str, shared: deep.Shared, depth: int) -> None:
    async def go() -> None:
        conn, queries = await _connect(url)
        for size in deep.batches(shared, depth):
            await queries.enqueue(["noop"] * size, [b""] * size, [0] * size)
        await conn.close()

    asyncio.run(go())


def deep_queue(url: str, concurrency: int, depth: int, phase: float, **_: Any) -> dict[str, Any]:
    """`depth` no-op jobs kept queued while one QueueManager runs them (systems/deep.py)."""

    async def install() -> None:
        conn, _ = await _installed(url)
        await conn.close()

    asyncio.run(install())
    shared = deep.Shared()
    producer = deep.start_producer(_produce, url, shared, depth)
    deep.wait_filled(shared, depth)

    async def go() -> dict[str, Any]:
        completions = deep.Completions(shared)
        conn, queries = await _connect(url)
        qm = QueueManager(queries)

        @qm.entrypoint("noop")
        async def noop(job: Any) -> None:
            completions.done()

        worker = asyncio.create_task(
            qm.run(batch_size=_batch_size(concurrency), max_concurrent_tasks=concurrency)
        )
        try:
            return await asyncio.to_thread(deep.measure, url, shared, completions, phase, producer)
        finally:
            shared.stop.set()
            qm.shutdown.set()
            await worker
            await conn.close()

    try:
        return asyncio.run(go())
    finally:
        shared.stop.set()
        producer.join(30)
