"""`tenure demo` as a new user runs it: a subprocess, its exit code and its summary."""

from __future__ import annotations

import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import tenure
from tests.support.cli import cli_env, tenure_cli
from tests.support.databases import direct, table_names, with_schema

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


def contents(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every tenure table of the test's database (its schema, on PostgreSQL)."""
    tables = sorted(name for name in table_names(url) if name.startswith("tenure_"))
    if url.startswith("sqlite:///"):
        lite = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            return {t: sorted(lite.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables}
        finally:
            lite.close()
    with psycopg.connect(direct(url)) as conn:
        return {
            t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables
        }


def schema_exists(url: str, schema: str) -> bool:
    with psycopg.connect(direct(url)) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,))
        return bool(row.fetchone() == (1,))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_demo_leaves_a_given_database_as_it_was(db_url: str, tmp_path: Path) -> None:
    """With --db naming a database that holds jobs (one of kind `invoice`, the demo's own
    kind, queued): the story plays, the database's jobs are untouched (not claimed by the
    demo's workers), and nothing of the demo is left in it. PostgreSQL: the demo's schema is
    dropped; SQLite: its jobs, of a kind of the run's own, are deleted."""
    with tenure.connect(db_url) as ledger:
        theirs = ledger.submit("invoice", {"invoice": "THEIRS-1"})
        ledger.submit("report", {}, idempotency_key="r-1")
    before = contents(db_url)
    result = run_demo("--db", db_url, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    check_story(result.stdout)
    assert contents(db_url) == before
    with tenure.connect(db_url) as ledger:
        assert ledger.get(theirs).state is tenure.JobState.QUEUED
        assert [e.type for e in ledger.events(theirs)] == ["job_submitted"]
    header = result.stdout.splitlines()[0]
    if db_url.startswith("sqlite"):
        assert re.search(r", jobs of kind invoice\.demo-\w+ \(deleted at the end\)$", header)
        return
    assert "connection is cut (proxy)" in result.stdout
    schema = re.search(r"schema (tenure_demo_\w+) \(dropped at the end\)$", header)
    assert schema is not None, header
    assert not schema_exists(db_url, schema[1])


def test_demo_on_a_new_sqlite_file_removes_it(tmp_path: Path) -> None:
    """--db naming a SQLite file that does not exist yet: the file (and what SQLite and tenure
    put beside it) is gone at the end."""
    work = tmp_path / "work"
    work.mkdir()
    result = run_demo("--db", f"sqlite:///{tmp_path / 'new.db'}", cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    check_story(result.stdout)
    assert "(a new file, removed at the end)" in result.stdout.splitlines()[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert list(work.iterdir()) == []


def demo_processes(workspace: Path) -> list[int]:
    """The live processes started for this demo run (the workers carry its workspace in
    their environment): none may outlive it."""
    mark = f"TENURE_DEMO_DIR={workspace}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                state = (proc / "stat").read_text().rsplit(") ", 1)[1][0]
                if state != "Z":
                    found.append(int(proc.name))
        except (OSError, IndexError, ValueError):
            continue  # not a process, or one that ended meanwhile
    return found


def interrupt_at_the_charge(*args: str, cwd: Path) -> tuple[subprocess.Popen[str], Path, str]:
    """Start `tenure demo ARGS`, wait until W1 has passed its lease check and stalls before
    its charge (its `checked-PID` file in the workspace; the story then has seconds to go:
    W2 waits out W1's lease), and press Ctrl-C. The process, its workspace, its header line."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "tenure.cli", "demo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=cli_env(),
    )
    assert demo.stdout is not None
    header = demo.stdout.readline()
    found = re.search(r"workspace (\S+)", demo.stdout.readline())
    assert found is not None, header
    workspace = Path(found[1])
    deadline = time.monotonic() + 60
    while not list(workspace.glob("checked-*")):
        assert demo.poll() is None, "the demo ended before W1 reached the charge"
        assert time.monotonic() < deadline, "W1 did not reach the charge in 60 s"
        time.sleep(0.01)  # polling the workspace, not waiting for an outcome
    assert demo_processes(workspace), "W1 is running"
    demo.send_signal(signal.SIGINT)
    return demo, workspace, header


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_ctrl_c_stops_the_workers_and_removes_the_workspace(tmp_path: Path) -> None:
    """Ctrl-C while W1 is frozen (SIGSTOP) at its charge and W2 waits for its lease: exit 130
    and one line on stderr, no traceback; no worker left (a frozen one neither), no workspace,
    nothing in the current folder."""
    demo, workspace, _ = interrupt_at_the_charge(cwd=tmp_path)
    out, err = demo.communicate(timeout=60)
    assert demo.returncode == 130, out + err
    assert err == f"interrupted; the demo stopped its workers and removed {workspace}\n"
    assert "Traceback" not in out
    assert not workspace.exists()
    assert demo_processes(workspace) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
@pytest.mark.parametrize("backend", ["postgres"])
def test_ctrl_c_on_postgres_drops_the_demos_schema(db_url: str, tmp_path: Path) -> None:
    """The same on PostgreSQL, with W1's connection cut at the proxy: its schema goes too."""
    demo, workspace, header = interrupt_at_the_charge("--db", db_url, cwd=tmp_path)
    out, err = demo.communicate(timeout=60)
    assert demo.returncode == 130, out + err
    assert err == f"interrupted; the demo stopped its workers and removed {workspace}\n"
    assert not workspace.exists()
    assert demo_processes(workspace) == []
    schema = re.search(r"schema (tenure_demo_\w+)", header)
    assert schema is not None, header
    assert not schema_exists(db_url, schema[1])


def test_ctrl_c_with_keep_keeps_the_workspace(tmp_path: Path) -> None:
    """`--keep`: the workers are stopped, the workspace (with their logs) stays, and the line
    says where."""
    demo, workspace, _ = interrupt_at_the_charge("--keep", cwd=tmp_path)
    try:
        out, err = demo.communicate(timeout=60)
        assert demo.returncode == 130, out + err
        assert err == f"interrupted; the demo stopped its workers; workspace kept: {workspace}\n"
        assert (workspace / "W1.log").exists()
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_demo_keep_keeps_its_jobs_in_a_given_database(db_url: str, tmp_path: Path) -> None:
    """`--keep` with --db: the demo's job stays in the database to be looked at (on
    PostgreSQL in its schema), and the output says what stayed and how to see or remove it."""
    with tenure.connect(db_url) as ledger:
        ledger.submit("report", {})
    result = run_demo("--db", db_url, "--keep", cwd=tmp_path)
    kept = re.search(r"workspace kept: (\S+)", result.stdout)
    if kept is not None:
        shutil.rmtree(kept[1], ignore_errors=True)
    assert result.returncode == 0, result.stdout + result.stderr
    if db_url.startswith("sqlite"):
        found = re.search(r"kept the demo's jobs \(kind (invoice\.demo-\w+)\) in ", result.stdout)
        assert found is not None, result.stdout
        with tenure.connect(db_url) as ledger:
            [job] = ledger.list(kind=found[1])
            assert job.state is tenure.JobState.SUCCEEDED
        return
    schema = re.search(r"kept schema (tenure_demo_\w+): .* DROP SCHEMA \1 CASCADE", result.stdout)
    assert schema is not None, result.stdout
    try:
        with tenure.connect(with_schema(direct(db_url), schema[1])) as ledger:
            [job] = ledger.list()
            assert job.kind == "invoice" and job.state is tenure.JobState.SUCCEEDED
    finally:
        with psycopg.connect(direct(db_url), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema[1]}" CASCADE'.encode())


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT")
def test_ctrl_c_while_the_command_starts_is_one_line_and_130(tmp_path: Path) -> None:
    """The installed `tenure` script interrupted while Python imports the `tenure` package
    (PYTHONVERBOSE says when that starts): exit 130, one line on stderr, no traceback."""
    script = Path(sys.executable).parent / "tenure"
    demo = subprocess.Popen(
        [str(script), "demo"], cwd=tmp_path, env=cli_env(extra={"PYTHONVERBOSE": "1"}),
        text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert demo.stderr is not None
    for line in demo.stderr:
        if "tenure/__init__.py" in line:  # the package's import has begun
            break
    demo.send_signal(signal.SIGINT)
    out, rest = demo.communicate(timeout=60)
    said = [line for line in rest.splitlines() if not line.startswith(("#", "import "))]
    assert demo.returncode == 130, out + rest
    # Mostly during the import ("tenure: interrupted"); on a fast start, in the demo itself.
    assert len(said) == 1 and said[0].startswith(("tenure: interrupted", "interrupted;")), said
    assert list(tmp_path.iterdir()) == []
