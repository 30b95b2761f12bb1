"""Fault tools that the demo, `tenure chaos`, the tests and the benchmarks share: a TCP proxy
that can cut and restore a connection (`proxy`), and worker processes that can be killed and
paused (`process`). Real processes and real sockets: faults are never flags inside the code
under test. And a clock a test moves (`clock.FakeClock`), for a worker's long deadlines."""

# And the handler seam (issue 42): `run_handler` runs a handler's steps, effects, waits and
# cancellation on `MemoryPort`, the worker's port in memory (no database). Imported on first
# use, so that the fault tools and the clock stay light for the processes that use only them.

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenure.testing.handler import HandlerRun, run_handler
    from tenure.testing.memory import MemoryPort

__all__ = ["HandlerRun", "MemoryPort", "run_handler"]

_LAZY = {
    "HandlerRun": "tenure.testing.handler",
    "run_handler": "tenure.testing.handler",
    "MemoryPort": "tenure.testing.memory",
}


def __getattr__(name: str) -> Any:
    """`run_handler`, `HandlerRun` and `MemoryPort`, from their modules on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module 'tenure.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
