"""Worker processes for the fault tests: `tenure worker tests.support.apps:app`, each logging
to its own file in the test's folder, stopped at the end of the test (the `workers` fixture)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

from tenure.testing.process import spawn_worker, wait_started
from tests.support.processes import ROOT


class Workers:
    """Worker processes started with `tenure worker tests.support.apps:app`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self, url: str, name: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = self.folder / f"{name}.log"
        proc = spawn_worker(
            "tests.support.apps:app",
            url,
            log,
            "--poll",
            "0.05",
            *args,
            env={
                "PYTHONPATH": str(ROOT),
                "TENURE_TEST_DIR": str(self.folder),
                "TENURE_TEST_NAME": name,
                **(env or {}),
            },
            cwd=ROOT,
        )
        self.procs.append(proc)
        wait_started(proc, log)
        return proc

    def log_events(self, name: str) -> list[dict[str, Any]]:
        lines = (self.folder / f"{name}.log").read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def marker(folder: Path, name: str) -> list[str]:
    path = folder / name
    return path.read_text().splitlines() if path.exists() else []


class LoggedWorker:
    """One `tenure worker APP` process on `url` (polling every 50 ms), its JSON log in
    `folder/worker.log`; `started=True` waits until it says it started."""

    def __init__(self, app: str, url: str, folder: Path, *args: str, started: bool = True) -> None:
        self.log = folder / "worker.log"
        self.proc = spawn_worker(
            app,
            url,
            self.log,
            "--poll",
            "0.05",
            *args,
            env={"PYTHONPATH": str(ROOT), "TENURE_TEST_DIR": str(folder)},
            cwd=ROOT,
        )
        if started:
            wait_started(self.proc, self.log)

    def events(self) -> list[dict[str, Any]]:
        """Every JSON line it logged so far."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]

    def logged(self, event: str) -> list[dict[str, Any]]:
        """The lines of one event."""
        return [entry for entry in self.events() if entry["event"] == event]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM (SIGKILL after 15 s); its exit code."""
        if self.alive():
            self.proc.terminate()
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
