"""awa 0.6 (`awa-pg` on PyPI): its Python SDK over the Rust engine, async no-op handlers, its
queue storage (append-only ready segments, a partitioned lease ring). Measured here: the drain
of a deep queue and a queue kept deep, the figures the long-horizon benchmarks compare it on."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import awa

from bench.systems import deep
from bench.systems.common import analyze

BATCH = 500
QUEUE = "bench"


@dataclass
class Noop:
    i: int


def drain(url: str, n: int, concurrency: int, **_: Any) -> dict[str, Any]:
    """Jobs per second from starting the runtime until all `n` no-op jobs ran."""

    async def go() -> dict[str, Any]:
        client = awa.AsyncClient(url, max_connections=max(10, concurrency // 2 + 4))
        await client.migrate()
        # The queue storage (its vacuum-aware engine) selected as the active backend.
        await client.install_queue_storage()
        for start in range(0, n, BATCH):
            await client.enqueue_many_copy(
                [Noop(i) for i in range(start, min(n, start + BATCH))], queue=QUEUE
            )
        analyze(url)
        done = 0
        finished = asyncio.Event()

        @client.task(Noop, queue=QUEUE)
        async def noop(job: Any) -> None:
            nonlocal done
            done += 1
            if done >= n:
                finished.set()

        begun = time.perf_counter()
        await client.start([(QUEUE, concurrency)])
        try:
            await asyncio.wait_for(finished.wait(), 600)
            elapsed = time.perf_counter() - begun
        finally:
            await client.shutdown()
            await client.close()
        return {"jobs_per_s": round(n / elapsed, 1), "jobs": n, "seconds": round(elapsed, 3)}

    result: dict[str, Any] = asyncio.run(go())
    return result


def _produce(url: str, shared: deep.Shared, depth: int) -> None:
    """The producer process installs awa's schema and queue storage, then keeps it deep."""

    async def go() -> None:
        client = awa.AsyncClient(url, max_connections=4)
        await client.migrate()
        await client.install_queue_storage()
        for size in deep.batches(shared, depth):
            await client.enqueue_many_copy([Noop(0) for _ in range(size)], queue=QUEUE)
        await client.close()

    asyncio.run(go())


def deep_queue(url: str, concurrency: int, depth: int, phase: float, **_: Any) -> dict[str, Any]:
    """`depth` no-op jobs kept queued while one runtime runs them (bench/systems/deep.py)."""
    shared = deep.Shared()
    producer = deep.start_producer(_produce, url, shared, depth)
    deep.wait_filled(shared, depth)

    async def go() -> dict[str, Any]:
        completions = deep.Completions(shared)
        client = awa.AsyncClient(url, max_connections=max(10, concurrency // 2 + 4))

        @client.task(Noop, queue=QUEUE)
        async def noop(job: Any) -> None:
            completions.done()

        await client.start([(QUEUE, concurrency)])
        try:
            return await asyncio.to_thread(deep.measure, url, shared, completions, phase, producer)
        finally:
            shared.stop.set()
            await client.shutdown()
            await client.close()

    try:
        result: dict[str, Any] = asyncio.run(go())
        return result
    finally:
        shared.stop.set()
        producer.join(30)


def _unsupported(**_: Any) -> dict[str, Any]:
    return {"unsupported": "not measured: this benchmark compares awa on the drain alone"}


enqueue_single = enqueue_batch = latency = heartbeats = failover = _unsupported
drain_processes = fairness = claim_cost = _unsupported
