"""What the worker log says: a failed attempt at WARNING (code, error type, attempt, retry),
where it failed at DEBUG (code locations only), and renewals summed up at INFO instead of a
line per lease and beat."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import tenure
import tenure.runtime.keeper as keeper_module
from tests.support.timing import FAST
from tests.support.waiting import poll


def _records(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "tenure_event", None) == event]


def test_a_failed_attempt_is_a_warning_with_its_code_type_attempt_and_retry(
    make_app: Callable[[], tenure.App], caplog: pytest.LogCaptureFixture
) -> None:
    """Two failing attempts of two: WARNING `attempt_failed`, the second not retried; the
    frames at DEBUG name the handler's file and line, and no message text is logged."""
    app = make_app()

    @app.job("breaks", max_attempts=2, **FAST)
    def breaks(ctx: tenure.JobContext, payload: Any) -> None:
        raise ValueError("secret customer data")

    job_id = app.submit("breaks", {}, max_attempts=2)
    with caplog.at_level(logging.DEBUG, logger="tenure"), tenure.Worker(app, concurrency=1):
        assert app.ledger.wait(job_id, 30).state is tenure.JobState.FAILED
        poll(lambda: len(_records(caplog, "attempt_failed")) >= 2 or None, 10, "two failures")
    failed = _records(caplog, "attempt_failed")
    assert all(r.levelno == logging.WARNING for r in failed)
    fields = [r.tenure_fields for r in failed]  # type: ignore[attr-defined]
    assert [(f["code"], f["error_type"], f["attempt"], f["retried"]) for f in fields] == [
        ("handler_error", "ValueError", 1, True),
        ("handler_error", "ValueError", 2, False),
    ]
    frames = _records(caplog, "handler_traceback")
    assert frames and frames[0].levelno == logging.DEBUG
    assert "test_worker_logs.py" in frames[0].tenure_fields["frames"]  # type: ignore[attr-defined]
    assert "secret customer data" not in caplog.text


def test_renewals_are_summed_up_at_info_not_logged_per_beat(
    make_app: Callable[[], tenure.App],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a job runs through many heartbeats, INFO has no `heartbeat_ok` line but a
    `heartbeats` summary with the renewals counted."""
    monkeypatch.setattr(keeper_module, "_SUMMARY_SECONDS", 0.5)
    app = make_app()
    release = threading.Event()

    @app.job("waits", **FAST)
    def waits(ctx: tenure.JobContext, payload: Any) -> None:
        release.wait(20)

    job_id = app.submit("waits", {})
    with caplog.at_level(logging.INFO, logger="tenure"), tenure.Worker(app, concurrency=1):
        poll(lambda: _records(caplog, "heartbeats") or None, 20, "a renewal summary")
        release.set()
        assert app.ledger.wait(job_id, 20).state is tenure.JobState.SUCCEEDED
    assert _records(caplog, "heartbeat_ok") == []
    summary = _records(caplog, "heartbeats")[0].tenure_fields  # type: ignore[attr-defined]
    assert summary["renewed"] >= 1 and summary["lost"] == 0


def test_jobs_are_summed_up_at_info_and_logged_one_by_one_at_debug(
    make_app: Callable[[], tenure.App],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twenty jobs: at INFO no per-job line (`job_claimed`, `job_started`, `job_ended`), a
    `jobs` summary that counts them; at DEBUG a line per job."""
    monkeypatch.setattr(keeper_module, "_SUMMARY_SECONDS", 0.3)
    app = make_app()

    @app.job("quick", **FAST)
    def quick(ctx: tenure.JobContext, payload: Any) -> None:
        return None

    ids = [app.submit("quick", {"n": n}) for n in range(20)]
    with caplog.at_level(logging.INFO, logger="tenure"), tenure.Worker(app, concurrency=4):
        for job_id in ids:
            assert app.ledger.wait(job_id, 20).state is tenure.JobState.SUCCEEDED
        poll(
            lambda: (
                sum(r.tenure_fields["succeeded"] for r in _records(caplog, "jobs")) >= 20  # type: ignore[attr-defined]
                or None
            ),
            20,
            "a jobs summary counting all twenty",
        )
    for per_job in ("job_claimed", "job_started", "job_ended"):
        assert _records(caplog, per_job) == [], per_job
    summaries = [r.tenure_fields for r in _records(caplog, "jobs")]  # type: ignore[attr-defined]
    assert sum(s["claimed"] for s in summaries) == 20
    assert all(r.levelno == logging.INFO for r in _records(caplog, "jobs"))

    caplog.clear()
    job_id = app.submit("quick", {"n": 99})
    with caplog.at_level(logging.DEBUG, logger="tenure"), tenure.Worker(app, concurrency=1):
        assert app.ledger.wait(job_id, 20).state is tenure.JobState.SUCCEEDED
        poll(lambda: _records(caplog, "job_ended") or None, 10, "the job's last line")
    assert [len(_records(caplog, e)) for e in ("job_claimed", "job_started")] == [1, 1]
