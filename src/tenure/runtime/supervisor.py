"""The worker's side tasks: every thread starts here, and a task that dies stops the worker.

A side task (the claim loop, the committer, the lease keeper's threads, the event loop of
async handlers, a handler thread's own bookkeeping) that raises is a bug or a broken
environment, never something to limp on with: it is logged at CRITICAL with the task's name
and the error's type (no content), and the crash hook stops the worker (as Procrastinate's
worker does when a side task dies).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from tenure.logs import emit

log = logging.getLogger("tenure.worker")
P = ParamSpec("P")
R = TypeVar("R")

CrashHook = Callable[[str, BaseException], None]


class Supervisor:
    """Starts named threads and reports the first crash of any of them to `on_crash`."""

    def __init__(self, on_crash: CrashHook) -> None:
        self._on_crash = on_crash
        self._lock = threading.Lock()
        self.crashed: tuple[str, BaseException] | None = None

    def spawn(self, name: str, target: Callable[[], None]) -> threading.Thread:
        """Run `target` on a new daemon thread `tenure-<name>`, supervised."""

        def supervised() -> None:
            try:
                target()
            except BaseException as exc:  # reported and acted on; the thread then ends
                self.report(name, exc)

        thread = threading.Thread(target=supervised, name=f"tenure-{name}", daemon=True)
        thread.start()
        return thread

    def guard(self, name: str, fn: Callable[P, R]) -> Callable[P, R]:
        """`fn`, reporting a crash to the hook before re-raising it (for pools and callbacks
        whose exceptions would otherwise vanish into a future or a dead thread)."""

        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                self.report(name, exc)
                raise

        return guarded

    def report(self, name: str, exc: BaseException) -> None:
        """A side task died: log it loudly and call the hook (the first crash only)."""
        with self._lock:
            first = self.crashed is None
            if first:
                self.crashed = (name, exc)
        emit(log, logging.CRITICAL, "side_task_crashed", task=name, error_type=type(exc).__name__)
        if first:
            self._on_crash(name, exc)
