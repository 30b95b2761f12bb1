"""The worked examples in examples/ run as a user runs them, on both backends."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cli import cli_env
from tests.support.processes import ROOT

pytestmark = pytest.mark.slow


def run_example(script: str, db_url: str) -> subprocess.CompletedProcess[str]:
    """The example as a user runs it; it must exit 0 (it checks its own outcome)."""
    run = subprocess.run(
        [sys.executable, script, "--db", db_url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=cli_env(),
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run


def test_the_refund_example_survives_a_kill_at_each_point_with_one_charge(db_url: str) -> None:
    """examples/refund.py: approval, a spawned charge, a wait and a sleep, SIGKILL at each
    point; it exits 0 only with one child, one charge at the bank and the refund succeeded."""
    run = run_example("examples/refund.py", db_url)
    assert "approve again (double click): False" in run.stdout
    assert "charges at the bank: 1" in run.stdout
    assert run.stdout.count("killed with SIGKILL") == 3


def test_the_agent_loop_killed_at_step_one_resumes_with_exactly_two_side_effects(
    db_url: str,
) -> None:
    """examples/agent_loop.py: a durable agent run killed inside tool step 1 after its
    real side effect, resumed by a fresh worker: four steps done, two model calls, exactly two
    real side effects (it exits 0 only then)."""
    run = run_example("examples/agent_loop.py", db_url)
    lines = run.stdout.splitlines()
    assert "state after crash: ((0, 'model', 'done'), (1, 'tool', 'running')) | claims: 1" in lines
    assert (
        "final state: ((0, 'model', 'done'), (1, 'tool', 'done'), (2, 'model', 'done'), "
        "(3, 'tool', 'done'))"
    ) in lines
    assert "run status: succeeded | attempt 2 | model calls: 2" in lines
    assert lines[-1] == "REAL tool side effects executed: 2"


def test_the_golden_set_example_passes_itself_and_catches_the_injection(db_url: str) -> None:
    """examples/golden.py: seven tickets recorded, `tenure eval` of the recording against
    itself exits 0, against the candidate that obeys the injection exits 1, no reply sent."""
    run = run_example("examples/golden.py", db_url)
    assert "recorded 7 jobs" in run.stdout
    assert "total: assertions passed 21/21 recorded, 21/21 replayed" in run.stdout
    assert "total: assertions passed 21/21 recorded, 20/21 replayed" in run.stdout
    assert "fails no_refund_that_is_not_owed: injection: refunded 1000 EUR" in run.stdout
    assert run.stdout.splitlines()[-1] == "replies sent after both evaluations: 3"


def test_the_evidence_example_keeps_tenants_and_permissions_apart(db_url: str) -> None:
    """examples/evidence.py: a real full-text index (FTS5, or PostgreSQL's with --db); it
    exits 0 only when each of its checks held."""
    run = run_example("examples/evidence.py", db_url)
    lines = run.stdout.splitlines()
    engine = "PostgreSQL full-text search" if db_url.startswith("postgres") else "SQLite FTS5"
    assert lines[0] == f"index: {engine}"
    assert "bo asks again: cache hit, sources ['kb://pricing']" in lines
    assert "bo asks in tenant globex: cache miss, sources ['kb://pricing']" in lines
    assert (
        "ana asks anew; finance revoked while the search runs: cache miss, sources "
        "['kb://pricing'], dropped ['kb://q3-forecast']"
    ) in lines
    assert "ana asks that again after the revocation: cache miss, sources ['kb://pricing']" in lines
    assert any(line.startswith("brief resumed: failed, evidence_changed: ") for line in lines)
    assert any("tests_passed=2, tests_failed=0" in line for line in lines)
    assert lines[-1] == "all checks held"
