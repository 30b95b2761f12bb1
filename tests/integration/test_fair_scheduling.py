"""Fair scheduling at claim time, on both backends, with real concurrent workers: per-kind
limits (`concurrency_limit`), per-tenant limits (`set_tenant_limit`, `tenure tenant limit`),
priorities, and a tenant with a long backlog that does not starve the others."""

from __future__ import annotations

import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
import tenure.ledger.limits
from tenure import JobState
from tenure.ledger import lease_port
from tenure.testing.proxy import proxy_to
from tests.support.cli import tenure_cli
from tests.support.databases import PostgresServer, drop_schema, new_schema
from tests.support.waiting import poll


class Gate:
    """Counts jobs running now (and the most ever) per label; jobs hold until released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.started: list[str] = []
        self.release = threading.Event()

    def hold(self, *labels: str) -> None:
        with self.lock:
            for label in labels:
                self.now[label] += 1
                self.most[label] = max(self.most[label], self.now[label])
            self.started.append(labels[0])
        self.release.wait(30)
        with self.lock:
            for label in labels:
                self.now[label] -= 1


@pytest.fixture
def gate() -> Iterator[Gate]:
    held = Gate()
    yield held
    held.release.set()


def test_a_kind_limit_holds_across_workers(db_url: str, gate: Gate) -> None:
    """`browser` may run 3 at once across two workers of 6 slots each; `ocr` fills the rest."""
    app = tenure.App(db_url)

    @app.job("browser", concurrency_limit=3)
    def browser(ctx: tenure.JobContext, payload: Any) -> None:
        gate.hold("browser")

    @app.job("ocr")
    def ocr(ctx: tenure.JobContext, payload: Any) -> None:
        gate.hold("ocr")

    app.ledger.submit_many("browser", [{}] * 10)
    app.ledger.submit_many("ocr", [{}] * 4)
    workers = [tenure.Worker(app, concurrency=6).start() for _ in range(2)]
    try:
        poll(lambda: (gate.now["ocr"] == 4 and gate.now["browser"] == 3) or None)
        gate.release.wait(0.5)  # time for a wrong claim to happen, if it would
        assert gate.most["browser"] == 3
        gate.release.set()
        poll(
            lambda: app.ledger.operations.counts(kind="browser")[JobState.SUCCEEDED] == 10 or None,
            30,
        )
        assert gate.most["browser"] == 3
    finally:
        gate.release.set()
        for worker in workers:
            worker.stop()
        app.close()


def test_a_tenant_limit_keeps_a_backlog_from_starving_the_others(db_url: str, gate: Gate) -> None:
    """Tenant `big` has 40 jobs queued first with a limit of 2; `small`'s 4 jobs, submitted
    after, all start at once instead of waiting behind the backlog."""
    app = tenure.App(db_url)

    @app.job("work")
    def work(ctx: tenure.JobContext, payload: Any) -> None:
        gate.hold(ctx.tenant)

    app.ledger.operations.set_tenant_limit("big", 2)
    assert app.ledger.operations.tenant_limits() == {"big": 2}
    app.ledger.submit_many("work", [{}] * 40, tenant="big")
    app.ledger.submit_many("work", [{}] * 4, tenant="small")
    workers = [tenure.Worker(app, concurrency=4).start() for _ in range(2)]
    try:
        poll(lambda: (gate.now["small"] == 4 and gate.now["big"] == 2) or None)
        assert gate.most["big"] == 2
        gate.release.set()
        poll(
            lambda: app.ledger.operations.counts(kind="work")[JobState.SUCCEEDED] == 44 or None, 60
        )
        assert gate.most["big"] == 2
    finally:
        gate.release.set()
        for worker in workers:
            worker.stop()
    app.ledger.operations.set_tenant_limit("big", None)
    assert app.ledger.operations.tenant_limits() == {}
    app.close()


def test_priorities_go_first(ledger: tenure.Ledger) -> None:
    """Higher priority is claimed first, on the plain and on the limited claim path."""
    low = ledger.submit("k", {}, priority=0)
    high = ledger.submit("k", {}, priority=5)
    mid = ledger.submit("k", {}, priority=1)
    taken = [ledger.claim("w", lease_seconds=30) for _ in range(3)]
    assert [lease.job_id for lease in taken if lease] == [high, mid, low]
    ledger.operations.set_tenant_limit("default", 10)  # the limited path keeps the same order
    again = [ledger.submit("k", {}, priority=p) for p in (0, 7, 3)]
    taken = [ledger.claim("w", lease_seconds=30) for _ in range(3)]
    assert [lease.job_id for lease in taken if lease] == [again[1], again[2], again[0]]


def test_tenure_tenant_limit_command(db_url: str) -> None:
    """`tenure tenant limit` sets and clears a limit; a bad number is a usage error (exit 2)."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return tenure_cli("tenant", "limit", *args, "--db", db_url)

    done = run("acme", "10")
    assert done.returncode == 0 and "at most 10" in done.stdout
    assert "no tenant 'acme' has API keys or jobs yet" in done.stderr
    with tenure.connect(db_url) as ledger:
        ledger.submit("k", {}, tenant="acme")
    assert "note" not in run("acme", "10").stderr
    with tenure.connect(db_url) as ledger:
        assert ledger.operations.tenant_limits() == {"acme": 10}
    for bad in ("0", "-3", "ten", "1.5"):
        result = run("acme", bad)
        assert result.returncode == 2 and "limit" in result.stderr
    assert run("acme", "none").returncode == 0
    with tenure.connect(db_url) as ledger:
        assert ledger.operations.tenant_limits() == {}


def test_bad_limits_are_refused(ledger: tenure.Ledger) -> None:
    """Non-positive or non-integer limits are refused and change nothing."""
    for bad in (0, -1, True, 1.5, "3"):
        with pytest.raises(tenure.InvalidArgument):
            ledger.operations.set_tenant_limit("acme", bad)  # type: ignore[arg-type]
        with pytest.raises(tenure.InvalidArgument):
            lease_port(ledger).claim_many("w", limit=1, kind_limits={"k": bad})  # type: ignore[dict-item]
    with pytest.raises(tenure.InvalidArgument):
        ledger.operations.set_tenant_limit("", 3)
    assert ledger.operations.tenant_limits() == {}
    app = tenure.App()
    with pytest.raises(tenure.InvalidJobClass, match="concurrency_limit"):
        app.job("x", concurrency_limit=0)(lambda ctx, p: None)


def test_the_limits_lookup_survives_a_database_outage(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`has_tenant_limits` is asked by the worker after every job and by its committer: with
    PostgreSQL cut off by a real proxy it keeps its last answer instead of raising, and looks
    again once the database is back."""
    monkeypatch.setattr(tenure.ledger.limits, "LIMITS_REFRESH", 0.0)
    schema = new_schema(postgres_server)
    try:
        with proxy_to(postgres_server.upstream()) as proxy:
            ledger = tenure.connect(postgres_server.proxied_url(schema, proxy.port), timeout=1.0)
            ledger.operations.set_tenant_limit("acme", 3)
            assert lease_port(ledger).has_tenant_limits() is True
            proxy.cut()
            assert lease_port(ledger).has_tenant_limits() is True
            with pytest.raises(tenure.StoreUnavailable):
                lease_port(ledger).claim_many("w", limit=1)
            proxy.restore()

            def limits_once_reconnected() -> dict[str, int] | None:
                try:  # the pool reconnects with a backoff: a refused call means "not yet"
                    return ledger.operations.tenant_limits()
                except tenure.StoreUnavailable:
                    return None

            assert poll(limits_once_reconnected, what="reconnected") == {"acme": 3}
            ledger.operations.set_tenant_limit("acme", None)
            assert lease_port(ledger).has_tenant_limits() is False
            ledger.close()
    finally:
        drop_schema(postgres_server, schema)
