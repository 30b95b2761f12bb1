"""Start the test worker script as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def worker(mode: str, url: str, *args: str) -> subprocess.Popen[str]:
    """A worker process with pipes on stdin and stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.ledger_worker", mode, url, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def run_worker(mode: str, url: str, *args: str, timeout: float = 60) -> tuple[int, list[Any]]:
    """Run a worker to its end; return its exit code and the JSON lines it printed."""
    proc = worker(mode, url, *args)
    out, err = proc.communicate(timeout=timeout)
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    if proc.returncode not in {0, 3, 4}:
        raise AssertionError(f"worker failed ({proc.returncode}): {err}")
    return proc.returncode, lines


def read_line(proc: subprocess.Popen[str]) -> Any:
    """The next JSON line the process printed."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        assert proc.stderr is not None
        raise AssertionError(f"worker ended early: {proc.stderr.read()}")
    return json.loads(line)


def release_together(procs: list[subprocess.Popen[str]]) -> list[Any]:
    """Wait until every process says it is ready, send 'go' to all, return their last lines."""
    for proc in procs:
        assert read_line(proc) == {"ready": True}
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        reports.append(json.loads(out.splitlines()[-1]))
    return reports
