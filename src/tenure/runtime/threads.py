"""Handler threads, kept between jobs: starting a thread per job costs more than a no-op job.

A thread takes the next job when it is idle; when none is idle a new one starts, so a handler
that never returns (abandoned after a stage timeout) never holds up a claimed job. Threads past
the worker's concurrency that stay idle for `_LINGER` seconds end. The worker's own code around
a handler catches every error of the handler; one that escapes it is reported to the
supervisor, which stops the worker.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from tenure.runtime.supervisor import Supervisor

_LINGER = 30.0


class HandlerThreads:
    """`run(fn, arg)` calls `fn(arg)` on an idle thread or a new one."""

    def __init__(self, keep: int, supervisor: Supervisor, name: str = "tenure-job") -> None:
        self._keep = keep
        self._supervisor = supervisor
        self._name = name
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue[tuple[Callable[[Any], None], Any] | None] = (
            queue.SimpleQueue()
        )
        self._idle = 0
        self._alive = 0
        self._serial = 0

    def run(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Start `fn(arg)` now."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._tasks.put((fn, arg))
                return
            self._alive += 1
            self._serial += 1
            serial = self._serial
        threading.Thread(
            target=self._serve, args=((fn, arg),), name=f"{self._name}-{serial}", daemon=True
        ).start()

    def stop(self) -> None:
        """Let idle threads end (running handlers finish on their own)."""
        with self._lock:
            for _ in range(self._idle):
                self._tasks.put(None)
            self._idle = 0

    def _serve(self, task: tuple[Callable[[Any], None], Any] | None) -> None:
        while task is not None:
            fn, arg = task
            try:
                fn(arg)
            except BaseException as exc:  # `fn` handles the handler's errors; this is ours
                with self._lock:
                    self._alive -= 1
                self._supervisor.report("handler-thread", exc)
                return
            with self._lock:
                self._idle += 1
            try:
                task = self._tasks.get(timeout=None if self._alive <= self._keep else _LINGER)
            except queue.Empty:
                with self._lock:
                    try:
                        task = self._tasks.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        task = None
        with self._lock:
            self._alive -= 1


def join_thread(thread: threading.Thread | None) -> None:
    """Join `thread` unless it is None or the caller itself."""
    if thread is not None and thread is not threading.current_thread():
        thread.join()
