"""A schedule across a failover between two slots, on a real primary/standby pair with a
synchronous standby (`pg_basebackup -R`, SIGKILL, `pg_ctl promote`): the slot fired before the
kill keeps its one job on the promoted standby, the next slot gets one, and a pass that repeats
the first slot after the failover makes no second job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import tenure
from tenure.schedules import Schedule, slot_key
from tests.support.pairs import started_pair
from tests.support.waiting import poll

pytestmark = [pytest.mark.failover, pytest.mark.postgres, pytest.mark.slow]
T0 = datetime(2030, 1, 7, 9, 0, 20, tzinfo=UTC)


def test_a_failover_between_two_slots_leaves_one_job_per_slot() -> None:
    schedule = Schedule(tenure.Every(60))
    with started_pair(synchronous=True) as pair, tenure.connect(pair.url(), timeout=2.0) as ledger:
        schedules = ledger.operations.schedules
        schedules.declare("report", schedule)
        (first,) = schedules.fire_due("report", schedule, now=T0).jobs
        pair.kill_primary()
        pair.promote()

        def fires(now: datetime) -> tuple[str, ...] | None:
            try:
                return schedules.fire_due("report", schedule, now=now).jobs
            except tenure.TenureError:  # the new primary is not there yet
                return None

        second = poll(lambda: fires(T0 + timedelta(seconds=60)), 60, "a pass on the new primary")
        repeated = schedules.fire_due("report", schedule, now=T0)
        jobs = ledger.list(kind="report")
        (row,) = schedules.list()
    assert len(second) == 1 and repeated.jobs == ()
    assert sorted(str(job.idempotency_key) for job in jobs) == [
        slot_key("report", T0.replace(second=0)),
        slot_key("report", T0.replace(second=0) + timedelta(seconds=60)),
    ]
    assert first in {job.id for job in jobs} and row.fired == 2
