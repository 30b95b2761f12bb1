"""A fleet's workers take turns at the search for expired leases and at the reading of the
queue from its head (PostgreSQL, schema version 22): a shared rescue claim searches only when
no other one of the same kinds did within the last second, gives its turn back when it took
over an expired lease (or came back full with jobs its floor skips), and searches whenever
its turn's row is missing. A claim that does not share (a hand-driven one) searches whenever
it is asked to. The turn is set up in the database by hand where a test needs it not due."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

import tenure
from tenure.ledger import lease_port
from tests.support.databases import direct, execute_sql

pytestmark = pytest.mark.parametrize("backend", ["postgres"])


def expired(url: str, job_id: str, timeout: float = 10.0) -> None:
    """Poll until the job's lease has ended by the database's clock."""
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(direct(url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT lease_until <= clock_timestamp() FROM tenure_jobs WHERE id = %s",
                (job_id,),
            ).fetchone()
        if row is not None and row[0]:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the lease of {job_id} did not end within {timeout:g}s")
        time.sleep(0.02)


def end_lease(url: str, job_id: str) -> None:
    """The lease ends now, by the database's clock (as if its holder had stopped renewing)."""
    execute_sql(url, f"UPDATE tenure_jobs SET lease_until = now() WHERE id = '{job_id}'")


def turn_is_due(url: str) -> bool:
    with psycopg.connect(direct(url), autocommit=True) as conn:
        row = conn.execute("SELECT bool_and(due_at <= clock_timestamp()) FROM tenure_rescue_turns")
        value = row.fetchone()
    assert value is not None and value[0] is not None, "no turn row"
    return bool(value[0])


def shared_rescue(ledger: tenure.Ledger, owner: str) -> list[tenure.Lease]:
    return lease_port(ledger).claim_many(
        owner, kinds=["task"], limit=4, lease_seconds=30, rescue=True, rescue_shared=True
    )


def held_past_its_turn(ledger: tenure.Ledger, url: str, due: str) -> tuple[str, tenure.Lease]:
    """A job held by "a", a shared rescue that found nothing (the turn's row written and
    taken), the turn set to `due` (SQL), then the lease ended: (the job's id, its lease)."""
    job_id = ledger.submit("task", {})
    (held,) = lease_port(ledger).claim_many(
        "a", kinds=["task"], limit=1, lease_seconds=30, rescue=False
    )
    assert shared_rescue(ledger, "b") == []
    execute_sql(url, f"UPDATE tenure_rescue_turns SET due_at = {due}")
    end_lease(url, job_id)
    return job_id, held


def test_a_shared_rescue_waits_for_its_turn_and_a_hand_claim_does_not(
    db_url: str, ledger: tenure.Ledger
) -> None:
    # The turn a little less than two turns ahead (the most a turn is kept).
    job_id, first = held_past_its_turn(ledger, db_url, "now() + interval '1.5 s'")
    assert shared_rescue(ledger, "c") == []  # not its turn: no search
    (taken,) = lease_port(ledger).claim_many(
        "d", kinds=["task"], limit=1, lease_seconds=30, rescue=True
    )
    assert (taken.job_id, taken.token > first.token) == (job_id, True)


def test_a_search_that_took_over_a_lease_gives_its_turn_back(
    db_url: str, ledger: tenure.Ledger
) -> None:
    port = lease_port(ledger)
    job_ids = ledger.submit_many("task", [{}, {}])
    port.claim_many("a", kinds=["task"], limit=2, lease_seconds=0.2, rescue=False)
    for job_id in job_ids:
        expired(db_url, job_id)
    (taken,) = lease_port(ledger).claim_many(
        "b", kinds=["task"], limit=1, lease_seconds=30, rescue=True, rescue_shared=True
    )
    assert turn_is_due(db_url)  # there may be more: the next rescue searches at once
    (also,) = shared_rescue(ledger, "c")
    assert {taken.job_id, also.job_id} == set(job_ids)
    assert shared_rescue(ledger, "d") == []  # found nothing: the next turn a turn later
    with psycopg.connect(direct(db_url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT extract(epoch FROM (SELECT due_at FROM tenure_rescue_turns)"
            " - (SELECT max(at) FROM tenure_events WHERE type = 'job_claimed'))"
        ).fetchone()
    assert row is not None and float(row[0]) >= 0.79, row


def test_a_turn_held_by_another_claim_is_skipped_without_waiting(
    db_url: str, ledger: tenure.Ledger
) -> None:
    """A claim never waits for another's search: the turn's row locked elsewhere (a search in
    progress), a shared rescue goes on without searching; the row free again, the next one
    searches."""
    job_id, _ = held_past_its_turn(ledger, db_url, "now()")
    with psycopg.connect(direct(db_url)) as searching:
        searching.execute("SELECT 1 FROM tenure_rescue_turns FOR UPDATE")
        assert shared_rescue(ledger, "c") == []
        searching.rollback()
    (taken,) = shared_rescue(ledger, "d")
    assert taken.job_id == job_id


def test_a_claim_with_no_room_leaves_the_turn(db_url: str, ledger: tenure.Ledger) -> None:
    """A limited claim whose kind is full could take nothing: it does not use up the turn,
    and a claim with room, right after, takes the expired lease."""
    port = lease_port(ledger)
    job_id, _held = ledger.submit_many("task", [{}, {}])
    port.claim_many("a", kinds=["task"], limit=2, lease_seconds=30, rescue=False)
    end_lease(db_url, job_id)  # the other lease holds: the kind's one slot is taken
    full = port.claim_many(
        "b", kinds=["task"], limit=1, kind_limits={"task": 1}, rescue=True, rescue_shared=True
    )
    assert full == []
    (taken,) = shared_rescue(ledger, "c")
    assert taken.job_id == job_id


def test_a_worker_takes_turns(db_url: str, connect: Callable[..., tenure.Ledger]) -> None:
    """A worker's rescue claims are shared ones: once it has run past its first rescue, the
    turn of its kinds has a row."""
    app = tenure.App(db_url)

    @app.job("turned")
    def turned(ctx: tenure.JobContext, payload: object) -> None:
        return None

    with tenure.Worker(app, concurrency=2, kinds=["turned"]):
        deadline = time.monotonic() + 10
        while rows_of_turns(db_url) == 0:
            assert time.monotonic() < deadline, "no turn row after 10 s of a worker"
            time.sleep(0.05)
    app.close()


def rows_of_turns(url: str) -> int:
    with psycopg.connect(direct(url), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM tenure_rescue_turns").fetchone()
    assert row is not None
    return int(row[0])


def test_a_missing_turn_row_means_searching(db_url: str, ledger: tenure.Ledger) -> None:
    """A row lost (a restore from before it, a table emptied by hand) costs turns, not
    rescues: the store thinks it wrote it, the statement searches anyway."""
    job_id = ledger.submit("task", {})
    assert shared_rescue(ledger, "b")[0].job_id == job_id  # queued: taken from the head
    execute_sql(db_url, "DELETE FROM tenure_rescue_turns")
    end_lease(db_url, job_id)
    (again,) = shared_rescue(ledger, "c")
    assert again.job_id == job_id


def test_a_turn_from_a_clock_far_ahead_is_due(db_url: str, ledger: tenure.Ledger) -> None:
    """A turn set an hour ahead came from another server's clock (a failover to one whose
    clock is behind): it does not hold the fleet's rescues back for that hour."""
    job_id, _ = held_past_its_turn(ledger, db_url, "now() + interval '1 hour'")
    (taken,) = shared_rescue(ledger, "c")
    assert taken.job_id == job_id


def test_rescue_shared_must_be_a_bool(ledger: tenure.Ledger) -> None:
    ledger.submit("task", {})
    with pytest.raises(tenure.InvalidArgument, match="rescue_shared must be True or False"):
        lease_port(ledger).claim_many("w", kinds=["task"], limit=1, rescue_shared="yes")  # type: ignore[arg-type]
    assert [job.attempt for job in ledger.list(state="queued")] == [0]


def test_a_shared_rescue_reads_the_queue_from_its_head_only_on_its_turn(
    db_url: str, connect: Callable[..., tenure.Ledger], ledger: tenure.Ledger
) -> None:
    """A job another process released keeps its place, below the floor of the claimer that
    took it. Off its turn (the turn's row taken by another claim), a shared rescue starts at
    its floor, as a plain claim does, and does not see it; on its turn it reads the queue from
    the head and takes it. A search short of its limit saw every claimable job: the next turn
    comes a turn later."""
    port, elsewhere = lease_port(ledger), connect()
    ledger.submit_many("task", [{"n": n} for n in range(3)])
    taken = port.claim_many("w", kinds=["task"], limit=10, lease_seconds=30, rescue=False)
    assert len(taken) == 3
    assert shared_rescue(ledger, "w") == []  # the turn's row written and taken: nothing
    execute_sql(db_url, "UPDATE tenure_rescue_turns SET due_at = now()")
    elsewhere.release(taken[0])
    with psycopg.connect(direct(db_url)) as searching:
        searching.execute("SELECT 1 FROM tenure_rescue_turns FOR UPDATE")
        assert shared_rescue(ledger, "w") == []  # off its turn: from its floor
        searching.rollback()
    (rescued,) = shared_rescue(ledger, "w")
    assert rescued.job_id == taken[0].job_id
    assert not turn_is_due(db_url)


def test_a_full_search_that_found_what_the_floors_skip_gives_its_turn_back(
    db_url: str, connect: Callable[..., tenure.Ledger], ledger: tenure.Ledger
) -> None:
    """A search from the head that came back full with jobs below its claimer's floor leaves
    the turn due (there may be more): the next shared rescue reads from the head too, until
    one comes back short."""
    port, elsewhere = lease_port(ledger), connect()
    ledger.submit_many("task", [{"n": n} for n in range(6)])
    taken = port.claim_many("w", kinds=["task"], limit=10, lease_seconds=30, rescue=False)
    assert len(taken) == 6
    for lease in taken[:5]:
        elsewhere.release(lease)
    first = shared_rescue(ledger, "w")  # limit 4: full
    assert [lease.job_id for lease in first] == [lease.job_id for lease in taken[:4]]
    assert turn_is_due(db_url)
    (last,) = shared_rescue(ledger, "w")
    assert last.job_id == taken[4].job_id
    assert not turn_is_due(db_url)
