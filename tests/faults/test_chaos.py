"""What `tenure chaos` may inject where, and what it counts: a fault outside a backend's
contract is reported as not applicable instead of being counted as a failure of tenure; a
second holder of one token at its receiver and a worker that exits by itself are counted, and
fail the run; `--faults restore` starts the last base backup as it is while workers run."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure.chaos.harness import Harness, Options
from tenure.chaos.receiver import Receiver
from tenure.fence import FenceGuard, raise_for_refusal
from tenure.testing.fenced import FencedCommand
from tenure.testing.pair import PairError
from tests.support.waiting import poll


@pytest.fixture
def sqlite_harness() -> Iterator[Harness]:
    harness = Harness(Options(db=None, faults=("kill", "pause", "partition", "restart", "skew")))
    yield harness
    harness.receiver.close()
    harness.guard.close()
    shutil.rmtree(harness.folder, ignore_errors=True)


def test_faults_outside_sqlites_contract_are_not_applicable(sqlite_harness: Harness) -> None:
    """On SQLite: no partition (a file), no restart (it stays), and no clock skew: SQLite's
    clock is each process's reading of the machine's clock, so one skewed process would write
    leases ending hours away (design.md gives the skew guarantee to PostgreSQL)."""
    assert sqlite_harness._applicable("kill") is None
    assert sqlite_harness._applicable("pause") is None
    for kind in ("partition", "restart", "skew"):
        assert sqlite_harness._applicable(kind), kind
    assert "PostgreSQL" in str(sqlite_harness._applicable("skew"))
    assert sqlite_harness.shim is None


def test_restore_runs_on_a_pair_the_harness_starts_itself(tmp_path: Path) -> None:
    """`--faults restore` starts its own primary/standby pair, as failover does: a database
    given beside it is refused with the reason, and nothing is started."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(tenure.InvalidArgument, match="leave --db out"):
        Harness(Options(db=url, faults=("restore", "kill")))
    assert not (tmp_path / "x.db").exists()


def test_the_chaos_receiver_refuses_a_second_holder_of_a_token(tmp_path: Path) -> None:
    """The chaos receiver passes each command's claim to its guard: the same token from another
    claim is refused with 409 `fence_conflict` and the receiver's highest token (which the
    worker's `raise_for_refusal` reads back), and no token is counted as accepted twice."""
    with FenceGuard(f"sqlite:///{tmp_path / 'receiver.db'}") as guard:
        receiver = Receiver(guard)

        def command(effect: str, claim: str) -> FencedCommand:
            return FencedCommand("/orders", "job-1", 7, f"tool-job:job-1:{effect}", claim, {})

        status, _ = receiver.handle(command("charge", "claim-a"))
        assert status == 201
        status, answer = receiver.handle(command("receipt", "claim-b"))
        assert status == 409
        with pytest.raises(tenure.FenceConflict) as refused:
            raise_for_refusal(status, answer)
        assert refused.value.highest == 7
        status, _ = receiver.handle(command("receipt", "claim-a"))
        assert status == 201
        assert receiver.accepted_twice() == 0
        assert [c.what for c in receiver.commands] == ["applied", "conflict", "applied"]
        assert receiver.count("unclaimed") == 0


def test_a_worker_that_exits_by_itself_is_counted_and_fails_the_run(tmp_path: Path) -> None:
    """A worker process that ends without the harness asking (here: SIGTERM from outside) is
    replaced so that the run goes on, and counted: `worker exits` is 1 and the run exits 1,
    every other guarantee holding."""
    report = tmp_path / "report.json"
    options = Options(db=None, jobs=6, workers=2, duration=6.0, faults=(), parents=0, report=report)
    harness = Harness(options, out=io.StringIO(), err=io.StringIO())
    outcome: list[int] = []
    runner = threading.Thread(target=lambda: outcome.append(harness.run()))
    runner.start()
    try:
        first = poll(lambda: harness.slots[0].proc, 30, "the first worker to start")
        first.send_signal(signal.SIGTERM)
        first.wait(30)
    finally:
        runner.join(120)
        shutil.rmtree(harness.folder, ignore_errors=True)
    assert outcome == [1]
    figures = json.loads(report.read_text())
    assert figures["worker_exits"] == 1
    assert figures["worker_exits_detail"][0]["slot"] == "w1"
    failed = [name for name, ok in figures["checks"].items() if not ok]
    assert failed == ["worker exits = 0"]


@pytest.mark.failover
@pytest.mark.postgres
@pytest.mark.slow
def test_a_restore_under_load_hands_out_no_token_twice(tmp_path: Path) -> None:
    """`--faults restore` on a pair the harness starts: the last base backup is started as it
    is in the killed primary's place while the workers run; no token is handed out twice or
    accepted twice at the receiver, no worker exits, and the run exits 0."""
    report = tmp_path / "report.json"
    options = Options(
        db=None,
        jobs=10,
        workers=2,
        duration=10.0,
        faults=("restore",),
        fault_every=4.0,
        replication="async",
        parents=0,
        seed=3,
        report=report,
    )
    try:
        harness = Harness(options, out=io.StringIO(), err=io.StringIO())
    except PairError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(exc))
    try:
        assert harness.run() == 0, report.read_text()
    finally:
        shutil.rmtree(harness.folder, ignore_errors=True)
    figures = json.loads(report.read_text())
    assert figures["pair"]["restores"] >= 1
    assert figures["pair"]["tokens_handed_out_twice"] == 0
    assert figures["tokens_accepted_twice_at_receiver"] == 0
    assert figures["worker_exits"] == 0
