"""Runs that wait, against real worker processes: a parent killed with SIGKILL at each point
of spawn and wait, and an approval signalled from other processes (the CLI, HTTP)."""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure import JobState
from tenure.demo.bank import BankServer
from tenure.ledger import lease_port
from tests.support.cli import tenure_cli
from tests.support.fixtures import fenced_bank
from tests.support.service import LiveServer
from tests.support.waiting import poll
from tests.support.workers import Workers, marker

pytestmark = pytest.mark.slow

POINTS = ["before_spawn", "between", "child_running", "after_children"]


@pytest.fixture
def bank(tmp_path: Path) -> Iterator[BankServer]:
    """A fenced receiver on loopback, in the test's process (it outlives every worker)."""
    with fenced_bank(tmp_path) as receiver:
        yield receiver


@pytest.mark.parametrize("point", POINTS)
def test_a_parent_killed_at_each_point_submits_each_child_once_and_applies_each_effect_once(
    point: str,
    ledger: tenure.Ledger,
    db_url: str,
    workers: Workers,
    bank: BankServer,
    tmp_path: Path,
) -> None:
    """SIGKILL before the spawn's record, between spawn and wait, while waiting (a child in
    its effect), and after the children ended: a fresh worker finishes every run with two
    children, each effect applied once at the fenced receiver, the parent's result from both."""
    env = {"TENURE_TEST_RECEIVER": bank.url}
    parent = ledger.submit("wait_parent", {})
    doomed = workers.start(
        db_url, "A", "--concurrency", "4", env={**env, "TENURE_TEST_KILL_AT": point}
    )
    poll(lambda: list(tmp_path.glob(f"at-{point}-{doomed.pid}")), 30, f"A at {point}")
    if point == "child_running":
        poll(lambda: ledger.get(parent).state is JobState.WAITING, 30, "the parent to wait")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    workers.start(db_url, "B", "--concurrency", "4", env=env)
    job = poll(lambda: (j := ledger.get(parent)).terminal and j, 60, "the parent to end")
    assert (job.state, job.result) == (JobState.SUCCEEDED, {"total": 30})
    children = ledger.children(parent)
    assert sorted(c.payload["n"] for c in children) == [1, 2]
    assert all(c.state is JobState.SUCCEEDED for c in children)
    applied = Counter(e.key for e in bank.bank.events if e.what == "applied")
    assert sorted(applied.values()) == [1, 1], applied
    assert set(applied) == {f"tool-job:{c.id}:charge" for c in children}
    assert marker(tmp_path, "planned") == [parent]


def test_an_approval_is_signalled_from_other_processes_and_resumes_elsewhere(
    ledger: tenure.Ledger, db_url: str, workers: Workers, tmp_path: Path
) -> None:
    """Two jobs suspend on worker A (no owner, no lease) and A stops; one is approved with
    `tenure signal` (a process of its own), the other over HTTP; both resume on worker B; a
    repeat is harmless, a different payload refused; the code before each wait ran once."""
    key = ledger.operations.create_tenant("acme")
    by_cli = ledger.submit("approval", {}, tenant="acme")
    by_http = ledger.submit("approval", {}, tenant="acme")
    a = workers.start(db_url, "A")
    for job_id in (by_cli, by_http):
        job = poll(lambda: (x := ledger.get(job_id)).state is JobState.WAITING and x, 30)  # noqa: B023
        assert (job.owner_id, job.lease_until) == (None, None)
    a.send_signal(signal.SIGTERM)
    a.wait(15)
    workers.start(db_url, "B")
    shown = tenure_cli("status", by_cli, db=db_url)
    assert shown.returncode == 0 and "signal approval" in shown.stdout
    sent = tenure_cli(
        "signal", by_cli, "approval", "--payload", '{"ok": true}', "--json", db=db_url
    )
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["stored"] is True
    with LiveServer(ledger) as server, server.client(key) as client:
        path = f"/v1/jobs/{by_http}/signals/approval"
        assert client.post(path, json={"ok": "http"}).json()["stored"] is True
        assert client.post(path, json={"ok": "http"}).json()["stored"] is False
        assert client.post(path, json={"ok": "other"}).status_code == 409
    for job_id, answer in ((by_cli, {"ok": True}), (by_http, {"ok": "http"})):
        done = poll(lambda: (x := ledger.get(job_id)).terminal and x, 30, "the job to end")  # noqa: B023
        assert done.result == {"answer": answer, "resumed_by": "B"}
        received = [e for e in ledger.events(job_id) if e.type == "signal_received"]
        assert len(received) == 1
    assert marker(tmp_path, "before-wait") == ["A", "A"]
    # A double click after the end is still answered as the first; another answer under the
    # name conflicts, as before the end; a new name is refused: the job has ended.
    repeat = tenure_cli("signal", by_cli, "approval", "--payload", '{"ok": true}', db=db_url)
    assert repeat.returncode == 0 and "already stored" in repeat.stdout, repeat.stderr
    late = tenure_cli("signal", by_cli, "approval", "--payload", '{"ok": false}', db=db_url)
    assert late.returncode == 1 and "different payload" in late.stderr
    new = tenure_cli("signal", by_cli, "another", db=db_url)
    assert new.returncode == 1 and "already succeeded" in new.stderr


def test_http_signals_first_wins_repeat_is_harmless_conflict_is_409(
    ledger: tenure.Ledger,
) -> None:
    tenant_key = ledger.operations.create_tenant("acme")
    job_id = ledger.submit("approval", {}, tenant="acme")
    other = ledger.submit("approval", {}, tenant="other")
    with LiveServer(ledger) as server, server.client(tenant_key) as client:
        path = f"/v1/jobs/{job_id}/signals/approval"
        first = client.post(path, json={"ok": True})
        assert (first.status_code, first.json()["stored"]) == (200, True)
        again = client.post(path, json={"ok": True})
        assert (again.status_code, again.json()["stored"]) == (200, False)
        conflict = client.post(path, json={"ok": False})
        assert (conflict.status_code, conflict.json()["error"]["code"]) == (409, "signal_conflict")
        assert client.post(f"/v1/jobs/{other}/signals/approval", json=1).status_code == 404
        bad = client.post(path, content=b"{not json", headers={"Content-Type": "application/json"})
        assert 400 <= bad.status_code < 500
        long_name = client.post(f"/v1/jobs/{job_id}/signals/{'x' * 201}", json=1)
        assert long_name.status_code == 422
        shown = client.get(f"/v1/jobs/{job_id}").json()
        assert shown["state"] == "queued"
        client.post(f"/v1/jobs/{job_id}/cancel")
        assert client.post(path, json={"ok": True}).json()["stored"] is False  # a repeat
        ended = client.post(f"/v1/jobs/{job_id}/signals/later", json={"ok": True})
        assert (ended.status_code, ended.json()["error"]["code"]) == (409, "terminal_job")


def test_metrics_count_waiting_jobs_by_kind(ledger: tenure.Ledger) -> None:
    """`/metrics` reports waiting jobs per kind (tenure_jobs{state="waiting"})."""
    from tenure.wait_state import WaitFor
    from tenure.waits import WaitRequest

    for _ in range(2):
        ledger.submit("approval", {})
    for lease in lease_port(ledger).claim_many("w", kinds=["approval"], limit=2, lease_seconds=30):
        lease_port(ledger).wait_on(
            lease, WaitRequest(0, "signal:approval", WaitFor.SIGNAL, signals=("approval",))
        )
    with LiveServer(ledger) as server, server.client() as client:
        text = client.get("/metrics").text
    assert 'tenure_jobs{kind="approval",state="waiting"} 2.0' in text


def test_tenure_signal_refuses_bad_input_with_the_documented_exit_codes(
    ledger: tenure.Ledger, db_url: str
) -> None:
    """Unknown or malformed id, a finished job, a conflict: exit 1; an empty name or a payload
    that is not JSON: exit 2. None of them writes an event."""
    job_id = ledger.submit("approval", {})
    before = len(ledger.events(job_id))
    cases = [
        (["signal", "not-a-uuid", "go"], 1),
        (["signal", "00000000-0000-4000-8000-000000000000", "go"], 1),
        (["signal", job_id, ""], 2),
        (["signal", job_id, "go", "--payload", "{oops"], 2),
    ]
    for argv, code in cases:
        run = tenure_cli(*argv, db=db_url)
        assert run.returncode == code, (argv, run.stderr)
        assert run.stderr.startswith(("tenure: error:", "usage:")), run.stderr
    assert len(ledger.events(job_id)) == before
    assert tenure_cli("signal", job_id, "go", "--payload", "1", db=db_url).returncode == 0
    conflict = tenure_cli("signal", job_id, "go", "--payload", "2", db=db_url)
    assert conflict.returncode == 1 and "different payload" in conflict.stderr
