"""Awaiting a job's end from asyncio code (the service's long-poll, the MCP server): woken by
the ledger's one listener when the job ends, reading the job again at a pause that doubles up
to 250 ms (a lost notification, another process on SQLite)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from tenure.ledger.ended import EndedWatch
from tenure.types import Job

FIRST_POLL, LAST_POLL = 0.02, 0.25


async def await_end(
    ended: EndedWatch,
    job_id: str,
    read: Callable[[], Awaitable[Job]],
    timeout: float | None,
    *,
    stop: Callable[[], Awaitable[bool]] | None = None,
    seen: Callable[[Job], Awaitable[None]] | None = None,
) -> Job:
    """The job once terminal, or as it is when `timeout` seconds (None: no bound) have passed
    or `stop()` says so. `seen(job)` is called with every reading (progress, say)."""
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    loop = asyncio.get_running_loop()
    woke = asyncio.Event()

    def ended_now() -> None:
        loop.call_soon_threadsafe(woke.set)

    unwatch = ended.watch(job_id, ended_now)
    pause = FIRST_POLL
    try:
        while True:
            job = await read()
            if seen is not None:
                await seen(job)
            remaining = None if deadline is None else deadline - time.monotonic()
            if job.terminal or (remaining is not None and remaining <= 0):
                return job
            if stop is not None and await stop():
                return job
            wait = pause if remaining is None else min(pause, remaining)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woke.wait(), wait)
            woke.clear()
            pause = min(pause * 2, LAST_POLL)
    finally:
        unwatch()
