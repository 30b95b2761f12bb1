"""Starting `tenure worker` as a separate process: for the demo, the chaos harness, the fault
tests and the benchmarks, which all need real worker processes they can signal."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tenure.clock import SYSTEM_CLOCK, Clock


def spawn_worker(
    target: str,
    url: str,
    log_path: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """`tenure worker TARGET --db URL ARGS…` in a new process; its output goes to `log_path`."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tenure.cli", "worker", target, "--db", url, *args],
            env={**os.environ, **(env or {})},
            cwd=cwd,
            stdout=log,
            stderr=log,
        )


def wait_started(
    proc: subprocess.Popen[bytes],
    log_path: Path,
    timeout: float = 30.0,
    *,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """Wait until the worker logged `worker_started`; raise if it exited or took `timeout`
    seconds of `clock` (it looks every 20 ms of that clock)."""
    deadline = clock.monotonic() + timeout
    while b"worker_started" not in log_path.read_bytes():
        if proc.poll() is not None or clock.monotonic() > deadline:
            raise RuntimeError(f"the worker did not start: {log_path.read_text()[-2000:]}")
        clock.sleep(0.02)
