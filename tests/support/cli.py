"""The one way tests run the `tenure` command: a real subprocess, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

# Variables of the developer's shell that would change what the command does.
_UNSET = ("TENURE_DATABASE_URL", "NO_COLOR")


def cli_env(db: str | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a `tenure` subprocess: the test's own, without the developer's
    database or colour settings, with TENURE_DATABASE_URL=`db` when given."""
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    if db is not None:
        env["TENURE_DATABASE_URL"] = db
    env.update(extra or {})
    return env


def tenure_cli(
    *args: str,
    db: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run `tenure ARGS…` to its end; its exit code, stdout and stderr (never raises on a
    non-zero exit: tests assert on it)."""
    return subprocess.run(
        [sys.executable, "-m", "tenure.cli", *args],
        capture_output=True,
        text=True,
        env=cli_env(db, env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def tenure_process(*args: str, output: IO[bytes], db: str | None = None) -> subprocess.Popen[bytes]:
    """Start a long-running `tenure ARGS…` (e.g. `serve`); its output goes to `output`."""
    return subprocess.Popen(
        [sys.executable, "-m", "tenure.cli", *args], stdout=output, stderr=output, env=cli_env(db)
    )


def kept_demo(db: str, page: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    """`tenure demo --db DB --keep --timeline PAGE` run in `folder`: the demo keeps its job in
    the given database, and its workspace in `folder` (its TMPDIR), for a test to look at."""
    return tenure_cli(
        "demo", "--db", db, "--keep", "--timeline", str(page), cwd=folder,
        env={"TMPDIR": str(folder)}, timeout=120,
    )  # fmt: skip
