"""Bad input raises a specific tenure error, says what to do, and writes nothing."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.ledger import lease_port


def snapshot(ledger: tenure.Ledger) -> list[tuple[object, ...]]:
    jobs = ledger.list(limit=1000)
    return [(j.id, j.state.value, j.token, len(ledger.events(j.id))) for j in jobs] + [
        (t.name, t.active_keys, t.revoked_keys) for t in ledger.operations.tenants()
    ]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda ledger: ledger.submit("", {}), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("   ", {}), tenure.InvalidArgument),
        (lambda ledger: ledger.submit(None, {}), tenure.InvalidArgument),
        (lambda ledger: ledger.submit(42, {}), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k\x00", {}), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {"x": object()}), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {"x": math.nan}), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {"x": "a\x00b"}), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {1, 2}), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", "x" * (1024 * 1024)), tenure.PayloadTooLarge),
        (lambda ledger: ledger.submit("k", {}, tenant=""), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, idempotency_key=""), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, max_attempts=0), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, max_attempts=True), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, priority=1.5), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, priority=2**31), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, priority=-(2**31) - 1), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, max_attempts=2**31), tenure.InvalidArgument),
        (lambda ledger: ledger.submit_many("k", []), tenure.InvalidArgument),
        (lambda ledger: ledger.submit_many("k", {"a": 1}), tenure.InvalidArgument),
        (lambda ledger: ledger.submit_many("k", "abc"), tenure.InvalidArgument),
        (lambda ledger: ledger.submit_many("", [{}]), tenure.InvalidArgument),
        (lambda ledger: ledger.submit_many("k", [{}, {"x": object()}]), tenure.InvalidArgument),
        (
            lambda ledger: ledger.submit_many("k", [{}, "x" * (1024 * 1024)]),
            tenure.PayloadTooLarge,
        ),
        (lambda ledger: ledger.submit_many("k", [{}], priority=2**31), tenure.InvalidArgument),
        (lambda ledger: ledger.submit_many("k", [{}] * 10_001), tenure.InvalidArgument),
        (lambda ledger: ledger.operations.create_tenant(""), tenure.InvalidArgument),
        (lambda ledger: ledger.operations.issue_key("nobody"), tenure.TenantNotFound),
        (lambda ledger: ledger.operations.revoke_keys("nobody"), tenure.TenantNotFound),
        (lambda ledger: ledger.submit("k", {}, run_after=-1), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, run_after=math.nan), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, run_after=math.inf), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, run_after=10**400), tenure.InvalidArgument),
        (lambda ledger: ledger.submit("k", {}, run_after=1e300), tenure.InvalidArgument),
        (
            lambda ledger: ledger.submit("k", {}, run_after=datetime(2030, 1, 1)),
            tenure.InvalidArgument,
        ),
        (lambda ledger: ledger.claim("w", lease_seconds=0), tenure.InvalidArgument),
        (lambda ledger: ledger.claim("w", lease_seconds=-5), tenure.InvalidArgument),
        (lambda ledger: ledger.claim("w", lease_seconds=math.inf), tenure.InvalidArgument),
        (lambda ledger: ledger.claim("w", lease_seconds="90"), tenure.InvalidArgument),
        (lambda ledger: ledger.claim("", lease_seconds=1), tenure.InvalidArgument),
        (lambda ledger: ledger.claim("w", kinds="ocr"), tenure.InvalidArgument),
        (lambda ledger: lease_port(ledger).claim_many("w", limit=0), tenure.InvalidArgument),
        (lambda ledger: ledger.list(state="done"), tenure.InvalidArgument),
        (lambda ledger: ledger.list(limit=0), tenure.InvalidArgument),
        (lambda ledger: ledger.get("nope"), tenure.JobNotFound),
    ],
)
def test_bad_input_raises_and_writes_nothing(
    ledger: tenure.Ledger, call: Callable[[tenure.Ledger], Any], error: type[Exception]
) -> None:
    """Each bad argument raises its specific error and leaves the database as it was."""
    ledger.submit("existing", {"n": 1})
    before = snapshot(ledger)
    with pytest.raises(error) as info:
        call(ledger)
    assert isinstance(info.value, tenure.TenureError)
    assert str(info.value)
    assert snapshot(ledger) == before


def test_bad_lease_input_changes_nothing(ledger: tenure.Ledger) -> None:
    """A zero lease on extend, a negative step or an oversized result leave the job as it was."""
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    before = snapshot(ledger)
    with pytest.raises(tenure.InvalidArgument):
        ledger.extend(lease, lease_seconds=0)
    with pytest.raises(tenure.InvalidArgument):
        ledger.save_step(lease, -1, {})
    with pytest.raises(tenure.PayloadTooLarge):
        ledger.complete(lease, "r" * (2 * 1024 * 1024))
    with pytest.raises(tenure.InvalidArgument):
        ledger.fail(lease, {"code": "x"}, retry_in=0)
    assert snapshot(ledger) == before
    assert ledger.get(job_id).state is tenure.JobState.RUNNING


def test_payload_limit_is_configurable(connect: Callable[..., tenure.Ledger]) -> None:
    """max_payload_bytes lowers (or raises) the limit."""
    ledger = connect(max_payload_bytes=64)
    ledger.submit("k", "x" * 50)
    with pytest.raises(tenure.PayloadTooLarge, match="64 bytes"):
        ledger.submit("k", "x" * 100)


def test_unknown_url_scheme_is_refused() -> None:
    """A URL of another database raises UnsupportedDatabase naming the schemes that work."""
    with pytest.raises(tenure.UnsupportedDatabase, match="sqlite:///"):
        tenure.connect("mysql://root@localhost/db")
    with pytest.raises(tenure.UnsupportedDatabase):
        tenure.connect("")


def test_sqlite_url_needs_an_existing_folder(tmp_path: Path) -> None:
    """A SQLite file in a missing folder, or :memory:, is refused with a clear message."""
    with pytest.raises(tenure.UnsupportedDatabase, match="does not exist"):
        tenure.connect(f"sqlite:///{tmp_path}/missing/t.db")
    with pytest.raises(tenure.UnsupportedDatabase, match="memory"):
        tenure.connect("sqlite:///:memory:")
    assert not (tmp_path / "missing").exists()


def test_unreachable_postgres_fails_fast() -> None:
    """connect() to a closed port raises StoreUnavailable within its timeout."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(tenure.StoreUnavailable, match="cannot connect"):
        tenure.connect(f"postgresql://nobody@127.0.0.1:{port}/none", timeout=1.0)


def test_submit_many_names_the_bad_payload_and_writes_none(ledger: tenure.Ledger) -> None:
    """One payload that is not JSON in a batch: the error says which, and no job is written."""
    with pytest.raises(tenure.InvalidArgument, match=r"payload 2 of 3"):
        ledger.submit_many("k", [{}, {"ok": 1}, {"bad": {1, 2}}])
    assert ledger.list() == []


def test_app_submit_refuses_a_kind_it_has_no_class_for(db_url: str) -> None:
    """`app.submit` of an unregistered kind (a typo) is refused, naming the app's kinds."""
    app = tenure.App(db_url)

    @app.job("ocr")
    def ocr(ctx: tenure.JobContext, payload: Any) -> None:
        return None

    try:
        with pytest.raises(tenure.InvalidArgument, match=r"no job class 'orc' \(its kinds: ocr\)"):
            app.submit("orc", {})
        assert app.ledger.list() == []
    finally:
        app.close()
