"""Failover with a real primary/standby pair (`pg_basebackup -R`, SIGKILL, `pg_ctl promote`):
invariant 16 (a promoted standby never hands out a token again), nothing acknowledged lost with
a synchronous standby, and a worker process and `tenure serve` that ride through on a
multi-host URL."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import tenure
from tenure.fence import FenceGuard
from tenure.storage.postgres.urls import build_conninfo
from tenure.testing.pair import ReplicaPair
from tests.support.cli import tenure_process
from tests.support.pairs import claim_when_promoted, started_pair
from tests.support.service import free_port
from tests.support.tokens import micros
from tests.support.waiting import poll, until_db_time_passes

pytestmark = [pytest.mark.failover, pytest.mark.postgres, pytest.mark.slow]
# A token a JSON number carries exactly in every language (design.md, invariant 16).
JSON_EXACT = 2**53


def clock_us(ledger: tenure.Ledger) -> int:
    """The database's clock in microseconds since 1970: the floor of every new token."""
    return micros(ledger.now())


@pytest.fixture
def async_pair() -> Iterator[ReplicaPair]:
    with started_pair(synchronous=False) as pair:
        yield pair


@pytest.fixture
def sync_pair() -> Iterator[ReplicaPair]:
    with started_pair(synchronous=True) as pair:
        yield pair


def test_a_promoted_standby_never_hands_out_a_token_again(
    async_pair: ReplicaPair, tmp_path: Path
) -> None:
    """W1's claim replicates, W2's dies with the old primary, W3 claims on the promoted
    standby: W3's token is above both, W2's late renewal and result are refused, and a
    receiver that took W2's command refuses W2 once W3 has spoken."""
    pair = async_pair
    with tenure.connect(pair.url(), timeout=2.0) as ledger:
        job = ledger.submit("k", {})
        other = ledger.submit("other", {})
        before = clock_us(ledger)
        w1 = ledger.claim("W1", kinds=["k"], lease_seconds=0.3)
        assert w1 is not None and w1.token > before
        pair.wait_replayed()
        pair.cut_replication()
        until_db_time_passes(ledger, w1.lease_until)
        w2 = ledger.claim("W2", kinds=["k"], lease_seconds=60)
        assert w2 is not None and w2.job_id == job and w2.token > w1.token
        guard = FenceGuard(f"sqlite:///{tmp_path / 'receiver.db'}")
        assert guard.apply(job, w2.token, "w2-first", lambda: "W2 applied") == "W2 applied"

        pair.kill_primary()
        pair.promote()
        w3 = claim_when_promoted(ledger, "W3", "k")
        assert pair.timeline() == 2
        assert w3.job_id == job
        assert JSON_EXACT > w3.token > w2.token > w1.token

        with pytest.raises(tenure.LeaseLost):
            ledger.extend(w2)
        with pytest.raises(tenure.LeaseLost):
            ledger.complete(w2, {"by": "W2"})
        assert guard.apply(job, w3.token, "w3-first", lambda: "W3 applied") == "W3 applied"
        with pytest.raises(tenure.StaleFence):
            guard.apply(job, w2.token, "w2-late", lambda: "W2 again")
        guard.close()

        ledger.complete(w3, {"by": "W3"})
        done = ledger.get(job)
        assert done.result == {"by": "W3"}
        assert done.token == w3.token
        claimed = [e.token for e in ledger.events(job) if e.type == "job_claimed"]
        assert claimed == [w1.token, w3.token]
        expired = [e for e in ledger.events(job) if e.type == "lease_expired"]
        assert [(e.token, e.owner_id) for e in expired] == [(w1.token, "W1")]
        # A cancel on the new primary fences above its clock too (and so above W2's token).
        before = clock_us(ledger)
        ledger.cancel(other)
        assert JSON_EXACT > ledger.get(other).token > max(before, w2.token)


def test_tokens_grow_from_the_database_clock_in_microseconds(async_pair: ReplicaPair) -> None:
    """Each claim's token is above the database clock in microseconds read before it (and
    within a microsecond of the clock read after it), strictly increasing, below 2^53."""
    with tenure.connect(async_pair.url(), timeout=2.0) as ledger:
        job = ledger.submit("k", {})
        tokens = []
        for _ in range(3):
            before = clock_us(ledger)
            lease = ledger.claim("W", kinds=["k"], lease_seconds=5)
            after = clock_us(ledger)
            assert lease is not None
            assert before < lease.token <= after + 1
            tokens.append(lease.token)
            ledger.release(lease)
        assert tokens == sorted(set(tokens))
        assert tokens[-1] < JSON_EXACT
        assert ledger.get(job).token == tokens[-1]


def test_a_synchronous_standby_has_every_acknowledged_submit(sync_pair: ReplicaPair) -> None:
    """Submits go on while the primary is killed and the standby promoted: every submit that
    was acknowledged is on the new primary."""
    pair = sync_pair
    acknowledged: list[str] = []
    refused = Counter[str]()
    stop = threading.Event()
    killed_at: list[float] = []
    first_after: list[float] = []

    def submitter(ledger: tenure.Ledger) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                acknowledged.append(ledger.submit("k", {"n": n}, idempotency_key=f"s-{n}"))
            except tenure.TenureError as exc:
                refused[type(exc).__name__] += 1
                time.sleep(0.02)
                continue
            if killed_at and not first_after:
                first_after.append(time.monotonic() - killed_at[0])

    with tenure.connect(pair.url(), timeout=2.0) as ledger:
        thread = threading.Thread(target=submitter, args=(ledger,))
        thread.start()
        try:
            poll(lambda: len(acknowledged) >= 100, 30, "100 submits")
            killed_at.append(time.monotonic())
            pair.kill_primary()
            pair.promote()
            before = len(acknowledged)
            poll(lambda: len(acknowledged) >= before + 100, 60, "100 submits after the promotion")
        finally:
            stop.set()
            thread.join(30)
        missing = [job_id for job_id in acknowledged if _absent(ledger, job_id)]
    print(
        f"\nsynchronous failover: {len(acknowledged)} acknowledged, {len(missing)} lost, "
        f"refused {dict(refused)}, first submit {first_after[0]:.2f}s after the kill"
    )
    assert missing == []
    assert sum(refused.values()) >= 1, "the kill was never felt: the test proves nothing"


def _absent(ledger: tenure.Ledger, job_id: str) -> bool:
    try:
        ledger.get(job_id)
    except tenure.JobNotFound:
        return True
    return False


def test_a_worker_and_the_service_ride_through_a_failover(
    sync_pair: ReplicaPair, workers: Any, tmp_path: Path
) -> None:
    """A `tenure worker` and `tenure serve` on the multi-host URL: /readyz goes 503 while no
    primary answers and 200 after the promotion by itself, every job ends succeeded, and each
    job's effect is applied once."""
    pair = sync_pair
    url = pair.url()
    port = free_port()
    with open(tmp_path / "serve.log", "wb") as output:
        serve = tenure_process(
            "serve", "--db", url, "--host", "127.0.0.1", "--port", str(port), output=output
        )
    try:
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)

        def readiness() -> int | None:
            try:
                return http.get("/readyz").status_code
            except httpx.TransportError:
                return None

        poll(lambda: readiness() == 200, 60, "tenure serve to be ready")
        worker = workers.start(url, "W", "--concurrency", "4")
        with tenure.connect(url, timeout=2.0) as ledger:
            ids = [ledger.submit("tally", {"nap": 0.2}) for _ in range(30)]
            poll(
                lambda: ledger.operations.counts(kind="tally")[tenure.JobState.SUCCEEDED] >= 5,
                60,
                "five jobs done before the failover",
            )
            killed = time.monotonic()
            pair.kill_primary()
            poll(lambda: readiness() == 503, 30, "/readyz to say 503")
            pair.promote()
            poll(lambda: readiness() == 200, 60, "/readyz to say 200 again")

            def ended() -> bool:
                try:
                    return all(ledger.get(job_id).terminal for job_id in ids)
                except tenure.StoreUnavailable:
                    return False

            poll(ended, 120, "every job to end")
            print(f"\nall jobs ended {time.monotonic() - killed:.1f}s after the kill")
            jobs = [ledger.get(job_id) for job_id in ids]
        assert [job.state for job in jobs] == [tenure.JobState.SUCCEEDED] * len(ids)
        lines = Counter((tmp_path / "tally").read_text().split())
        assert {f"tool-job:{job_id}:tally" for job_id in ids} == set(lines)
        assert max(lines.values()) == 1
        assert worker.poll() is None, "the worker died in the failover"
    finally:
        serve.terminate()
        serve.wait(30)


def test_a_url_naming_only_standbys_is_refused_at_connect(async_pair: ReplicaPair) -> None:
    """No host of the URL accepts writes: connect says so at once, not as a pool time-out."""
    standby = async_pair.standby
    url = f"postgresql://postgres@127.0.0.1:{standby.port}/postgres?target_session_attrs=read-write"
    with pytest.raises(tenure.StoreUnavailable, match="accepts writes"):
        tenure.connect(url, timeout=2.0)


@pytest.mark.parametrize("attrs", ["read-only", "standby", "prefer-standby", "any"])
def test_session_attrs_that_allow_a_standby_are_refused(attrs: str) -> None:
    """A writer may not ask for a standby: the URL is refused with the reason, nothing opened."""
    url = f"postgresql://u@127.0.0.1:1,127.0.0.1:2/db?target_session_attrs={attrs}"
    with pytest.raises(tenure.UnsupportedDatabase, match="read-write"):
        tenure.connect(url)


def test_a_multi_host_url_asks_for_the_writable_server() -> None:
    """Several hosts and no target_session_attrs: tenure asks libpq for read-write."""
    built = build_conninfo("postgresql://u@h1:5432,h2:5433/db", 5.0)
    assert "target_session_attrs=read-write" in built
    assert "target_session_attrs" not in build_conninfo("postgresql://u@h1/db", 5.0)
    assert "target_session_attrs=primary" in build_conninfo(
        "postgresql://u@h1,h2/db?target_session_attrs=primary", 5.0
    )


def test_chaos_failover_refuses_a_database_of_its_own(tmp_path: Path) -> None:
    """`tenure chaos --faults failover` starts its own pair: a --db beside it is a usage
    error (exit 2, one line, no traceback), and nothing is started."""
    from tests.support.cli import tenure_cli

    out = tenure_cli(
        "chaos", "--faults", "failover", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--jobs", "1"
    )
    assert out.returncode == 2
    assert "leave --db out" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "x.db").exists()
