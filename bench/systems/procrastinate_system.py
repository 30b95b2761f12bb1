"""Procrastinate 3 (PyPI), its PsycopgConnector, async no-op tasks, LISTEN/NOTIFY on."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import procrastinate

from bench.systems.common import analyze, latency_figures, transactions

BATCH = 500


def _app(url: str) -> tuple[procrastinate.App, dict[int, float], asyncio.Event]:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    started: dict[int, float] = {}
    release = asyncio.Event()

    @app.task(name="noop")
    async def noop(i: int = 0) -> None:
        return None

    @app.task(name="probe")
    async def probe(i: int) -> None:
        started[i] = time.perf_counter()

    @app.task(name="hold")
    async def hold() -> None:
        await release.wait()

    return app, started, release


def _run(coro: Any) -> dict[str, Any]:
    result: dict[str, Any] = asyncio.run(coro)
    return result


def enqueue_single(url: str, n: int, **_: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        app, _, _ = _app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            task = app.tasks["noop"]
            begun = time.perf_counter()
            for i in range(n):
                await task.defer_async(i=i)
            elapsed = time.perf_counter() - begun
        return {"jobs_per_s": round(n / elapsed, 1), "jobs": n}

    return _run(go())


async def _enqueue_batch(app: procrastinate.App, name: str, n: int) -> float:
    task = app.tasks[name]
    begun = time.perf_counter()
    for start in range(0, n, BATCH):
        batch: list[dict[str, Any]] = [{"i": i} for i in range(start, min(n, start + BATCH))]
        await task.batch_defer_async(*batch)
    return time.perf_counter() - begun


def enqueue_batch(url: str, n: int, **_: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        app, _, _ = _app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            elapsed = await _enqueue_batch(app, "noop", n)
        return {"jobs_per_s": round(n / elapsed, 1), "jobs": n, "batch": BATCH}

    return _run(go())


def drain(url: str, n: int, concurrency: int, **_: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        app, _, _ = _app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            await _enqueue_batch(app, "noop", n)
            analyze(url)
            begun = time.perf_counter()
            # wait=False: the worker returns once the queue is empty.
            await app.run_worker_async(
                concurrency=concurrency, wait=False, install_signal_handlers=False
            )
            elapsed = time.perf_counter() - begun
            async with app.connector.pool.connection() as conn:  # type: ignore[attr-defined]
                cur = await conn.execute(
                    "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
                )
                row = await cur.fetchone()
        done = int(row[0])
        if done != n:
            raise RuntimeError(f"procrastinate drained {done} of {n} jobs")
        return {"jobs_per_s": round(n / elapsed, 1), "jobs": n, "seconds": round(elapsed, 3)}

    return _run(go())


def latency(url: str, n: int, concurrency: int, pause: float, **_: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        app, started, _ = _app(url)
        samples: list[float] = []
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            worker = asyncio.create_task(
                app.run_worker_async(concurrency=concurrency, install_signal_handlers=False)
            )
            await asyncio.sleep(0.5)
            task = app.tasks["probe"]
            for i in range(n):
                sent = time.perf_counter()
                await task.defer_async(i=i)
                while i not in started:
                    await asyncio.sleep(0.0005)
                samples.append((started[i] - sent) * 1000)
                await asyncio.sleep(pause)
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        return latency_figures(samples)

    return _run(go())


def heartbeats(url: str, n: int, seconds: float, **_: Any) -> dict[str, Any]:
    """Procrastinate's heartbeat is per worker (every 5 s here), not per job."""

    async def go() -> dict[str, Any]:
        app, _, release = _app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            task = app.tasks["hold"]
            for start in range(0, n, BATCH):
                await task.batch_defer_async(*({} for _ in range(start, min(n, start + BATCH))))
            worker = asyncio.create_task(
                app.run_worker_async(
                    concurrency=n, install_signal_handlers=False, update_heartbeat_interval=5
                )
            )
            async with app.connector.pool.connection() as conn:  # type: ignore[attr-defined]
                deadline = time.monotonic() + 300
                while True:
                    cur = await conn.execute(
                        "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'"
                    )
                    row = await cur.fetchone()
                    if row[0] >= n or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)
            before = await asyncio.to_thread(transactions, url)
            await asyncio.sleep(seconds)
            after = await asyncio.to_thread(transactions, url)
            release.set()
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        return {
            "leases": n,
            "window_s": seconds,
            "statements_per_s": round((after - before) / seconds, 2),
            "heartbeat_interval_s": 5,
        }

    return _run(go())


def failover(url: str, **_: Any) -> dict[str, Any]:
    return {
        "unsupported": "a job of a killed worker stays 'doing' until the application runs "
        "its own periodic task (get_stalled_jobs + retry); nothing recovers it by itself"
    }


def claim_cost(url: str, history: int, **_: Any) -> dict[str, Any]:
    return {"unsupported": "not measured (tenure's own target)"}
