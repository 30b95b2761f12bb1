"""Where the wall clock was read before, a clock passed in: a client's retry pauses, a tool
call's hour-long timeout and a wait for a real process pass on a `FakeClock`, so that no real
second passes (the fake clock moving by the very amounts says the pauses were its own)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any, Unpack

import pytest

import tenure
from tenure.integrations.jobcalls import UNCLAIMED_WARNING, JobCalls
from tenure.options import SubmitKwargs
from tenure.testing.clock import FakeClock
from tenure.testing.process import wait_started
from tests.support.service import free_port


def test_a_clients_retry_pauses_pass_on_its_clock() -> None:
    """A read the service never answers (nothing listens) is resent after 0.2, 0.4 and 0.8 s
    of the client's clock: a FakeClock's, so no real second passes."""
    clock = FakeClock()
    began = clock.monotonic()
    url = f"http://127.0.0.1:{free_port()}"
    client = tenure.Client(url, "key", retries=3, clock=clock)
    with client, pytest.raises(tenure.ServiceUnavailable):
        client.get("00000000-0000-0000-0000-000000000000")
    assert clock.monotonic() - began == pytest.approx(1.4)


class _UnclaimedService(tenure.Client):
    """`tenure serve` as a JobCalls sees it, over a ledger no worker reads: each wait of
    `timeout` seconds passes at once on the fake clock and finds the job still queued."""

    def __init__(self, ledger: tenure.Ledger, clock: FakeClock) -> None:
        super().__init__("http://127.0.0.1:9", clock=clock)
        self.ledger, self.fake = ledger, clock
        self.waits: list[float] = []

    def submit(
        self,
        kind: str,
        payload: Any,
        options: tenure.SubmitOptions | None = None,
        **changes: Unpack[SubmitKwargs],
    ) -> str:
        return self.ledger.submit(kind, payload, options, **changes)

    def wait(self, job_id: str, timeout: float = 30.0) -> tenure.Job:
        self.waits.append(timeout)
        self.fake.sleep(timeout)
        return self.ledger.get(job_id)


def test_a_tool_calls_hour_long_timeout_comes_when_its_clock_says(
    ledger: tenure.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool call with an hour's timeout whose job nobody claims: the unclaimed warning at
    10 s and the TimeoutError at 3600 s of the call's clock, in well under a second."""
    clock = FakeClock()
    service = _UnclaimedService(ledger, clock)
    calls = JobCalls(service, "ocr", timeout=3600.0, tenant=None, clock=clock)
    job_id = calls.submit({}, "call-1")
    began = clock.monotonic()
    with caplog.at_level(logging.WARNING, logger="tenure"), pytest.raises(TimeoutError):
        calls.wait(job_id)
    assert clock.monotonic() - began == pytest.approx(3600.0)
    said = [r.getMessage() for r in caplog.records if "no worker has claimed" in r.getMessage()]
    assert len(said) == 1
    # The warning came on the first read past UNCLAIMED_WARNING seconds of the fake clock.
    reads_before_warning = 0
    elapsed = 0.0
    while elapsed < UNCLAIMED_WARNING:
        elapsed += service.waits[reads_before_warning]
        reads_before_warning += 1
    assert reads_before_warning < len(service.waits)
    assert ledger.get(job_id).state is tenure.JobState.QUEUED


def test_waiting_for_a_real_process_still_goes_by_the_clock(tmp_path: Path) -> None:
    """`wait_started` waits for a real worker process; on a FakeClock its minute's timeout
    passes in its 20 ms pauses, at once."""
    log = tmp_path / "worker.log"
    log.write_bytes(b"")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        clock = FakeClock()
        began = clock.monotonic()
        with pytest.raises(RuntimeError, match="did not start"):
            wait_started(proc, log, timeout=60.0, clock=clock)
        assert 60.0 < clock.monotonic() - began < 60.1
    finally:
        proc.kill()
        proc.wait()
