"""`tenure demo` as a new user runs it: a subprocess, its exit code and its summary."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import tenure_cli

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def run_demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return tenure_cli("demo", *args, cwd=cwd, timeout=120)


def check_story(out: str) -> None:
    assert "ok    effects applied:        1" in out
    assert "ok    stale effects refused:  1" in out
    assert "ok    stale results rejected:" in out
    w1, w2 = (
        int(re.search(rf"{who}  claims the job \(token (\d+),", out)[1])  # type: ignore[index]
        for who in ("W1", "W2")
    )
    assert 0 < w1 < w2
    assert f"ok    final state:            succeeded by W2 (token {w2})" in out
    assert f"REFUSED stale fence {w1} " in out
    assert "\033[" not in out  # piped: no colour


def test_demo_on_the_embedded_sqlite_default(tmp_path: Path) -> None:
    """With no arguments, in an empty folder: the whole story on a temporary SQLite file,
    exit 0, and nothing left in the current folder."""
    result = run_demo(cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    check_story(result.stdout)
    assert "frozen (SIGSTOP" in result.stdout
    assert list(tmp_path.iterdir()) == []
    workspace = Path(re.search(r"workspace (\S+)", result.stdout).group(1))  # type: ignore[union-attr]
    assert not workspace.exists(), "a passed run leaves no workspace behind"


def test_demo_keep_leaves_the_workspace_for_a_look(tmp_path: Path) -> None:
    """`tenure demo --keep` keeps the databases and worker logs and says where."""
    result = run_demo("--keep", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    kept = Path(re.search(r"workspace kept: (\S+)", result.stdout).group(1))  # type: ignore[union-attr]
    try:
        assert (kept / "tenure.db").exists()
    finally:
        shutil.rmtree(kept, ignore_errors=True)


@pytest.mark.parametrize("backend", ["postgres"])
def test_demo_on_postgres(db_url: str, tmp_path: Path) -> None:
    """With --db: on PostgreSQL the stale worker's connection is really cut by a proxy."""
    result = run_demo("--db", db_url, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    check_story(result.stdout)
    assert "connection is cut (proxy)" in result.stdout
