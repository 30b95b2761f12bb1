"""Awaiting a job's end from asyncio code (the service's long-poll, the MCP server): woken by
the ledger's `EndedWatch` when the job ends; the job is read when the wait starts, when it is
woken and at its deadline, and no more often than `read_every` seconds besides (MCP progress)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tenure.types import Job

if TYPE_CHECKING:
    from tenure.ledger.face import Ledger

# How often `stop()` (a client that hung up) is asked: no statement, a check of a socket.
STOP_CHECK_SECONDS = 5.0


async def await_end(
    ledger: Ledger,
    job_id: str,
    read: Callable[[], Awaitable[Job]],
    timeout: float | None,
    *,
    stop: Callable[[], Awaitable[bool]] | None = None,
    seen: Callable[[Job], Awaitable[None]] | None = None,
    read_every: float | None = None,
    settled: Callable[[Job], bool] | None = None,
    read_every_max: float | None = None,
) -> Job:
    """The job once terminal or `settled(job)` (waiting for input, say), or as it is when
    `timeout` seconds (None: no bound) have passed or `stop()` says so. `seen(job)` is called
    with every reading (progress, say). With `read_every_max`, the pause between readings
    doubles from `read_every` up to it (a job that asks soon is seen soon, a long one costs
    few statements)."""
    clock = ledger._core.clock  # the ledger's own clock
    deadline = None if timeout is None else clock.monotonic() + max(0.0, timeout)
    loop = asyncio.get_running_loop()
    woke = asyncio.Event()

    def ended_now() -> None:
        loop.call_soon_threadsafe(woke.set)

    unwatch = ledger._ended.watch(job_id, ended_now)
    try:
        job = await read()
        last_read = clock.monotonic()
        while True:
            if seen is not None:
                await seen(job)
            if job.terminal or (settled is not None and settled(job)):
                return job
            while not woke.is_set():
                now = clock.monotonic()
                if deadline is not None and now >= deadline:
                    return await read()
                if read_every is not None and now - last_read >= read_every:
                    break
                if stop is not None and await stop():
                    return job
                pause = STOP_CHECK_SECONDS if stop is not None else None
                for bound in (deadline, None if read_every is None else last_read + read_every):
                    if bound is not None:
                        left = bound - now
                        pause = left if pause is None else min(pause, left)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), pause)
            woke.clear()
            job = await read()
            last_read = clock.monotonic()
            if read_every is not None and read_every_max is not None:
                read_every = min(read_every * 2, read_every_max)
    finally:
        unwatch()
