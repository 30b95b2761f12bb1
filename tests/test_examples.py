"""The worked examples in examples/ run as a user runs them, on both backends."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cli import cli_env
from tests.support.processes import ROOT

pytestmark = pytest.mark.slow


def test_the_refund_example_survives_a_kill_at_each_point_with_one_charge(db_url: str) -> None:
    """examples/refund.py: approval, a spawned charge, a wait and a sleep, SIGKILL at each
    point; it exits 0 only with one child, one charge at the bank and the refund succeeded."""
    run = subprocess.run(
        [sys.executable, "examples/refund.py", "--db", db_url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=cli_env(),
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "approve again (double click): False" in run.stdout
    assert "charges at the bank: 1" in run.stdout
    assert run.stdout.count("killed with SIGKILL") == 3
