"""PostgreSQL's storage layout (schema version 16): a renewal is a HOT update, and a fleet
upgrades to the layout while its workers hold leases and claim.

Counted by PostgreSQL itself (`pg_stat_user_tables`), never timed. Each backend reports its
counts when it has been idle for a second, so the tests poll the counters with a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest

import tenure
from tenure import JobState
from tenure.ledger import lease_port
from tenure.storage.postgres.claims import claim_explained
from tests.support.databases import direct, execute_sql

pytestmark = pytest.mark.parametrize("backend", ["postgres"])

HELD = 256
ROUNDS = 8
BATCH = 32  # a worker renews its leases in one statement: at most its handler slots


def updates(url: str) -> tuple[int, int]:
    """tenure_jobs' (updates, HOT updates) in the test's schema, as reported so far."""
    with psycopg.connect(direct(url), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE schemaname = current_schema() AND relname = 'tenure_jobs'"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def updates_reaching(url: str, count: int, timeout: float = 30.0) -> tuple[int, int]:
    """Poll until at least `count` updates of tenure_jobs are reported."""
    deadline = time.monotonic() + timeout
    while True:
        seen = updates(url)
        if seen[0] >= count:
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"{seen[0]} updates reported, {count} expected")
        time.sleep(0.1)


def test_a_renewal_is_a_hot_update(db_url: str, ledger: tenure.Ledger) -> None:
    """Renewals change no indexed column and find room on their page: at least 90% of them
    are HOT (no index entry written, the old version pruned without a vacuum). Before schema
    version 16 none was (lease_until was an index key)."""
    port = lease_port(ledger)
    ledger.submit_many("filler", [{"n": n} for n in range(HELD)])
    ledger.submit_many("held", [{"n": n} for n in range(HELD)])
    ledger.submit_many("filler", [{"n": n} for n in range(HELD)])
    leases = port.claim_many("holder", kinds=["held"], limit=HELD, lease_seconds=60)
    assert len(leases) == HELD
    before_updates, before_hot = updates_reaching(db_url, HELD)
    for _ in range(ROUNDS):
        for start in range(0, HELD, BATCH):
            renewed = port.extend_many(leases[start : start + BATCH], 60)
            assert len(renewed.renewed) == len(leases[start : start + BATCH])
    renewals = ROUNDS * HELD
    after_updates, after_hot = updates_reaching(db_url, before_updates + renewals)
    assert after_updates - before_updates == renewals
    assert after_hot - before_hot >= 0.9 * renewals, (after_hot - before_hot, renewals)


def test_the_layout_keeps_lease_ends_out_of_every_index(db_url: str, ledger: tenure.Ledger) -> None:
    """No index of tenure_jobs names lease_until or heartbeat_at, in its key or its predicate,
    and new pages keep the fillfactor's room."""
    with psycopg.connect(direct(db_url), autocommit=True) as conn:
        definitions = [
            str(row[0])
            for row in conn.execute(
                "SELECT indexdef FROM pg_indexes "
                "WHERE schemaname = current_schema() AND tablename = 'tenure_jobs'"
            )
        ]
        options = conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = 'tenure_jobs'::regclass"
        ).fetchone()
    assert definitions
    assert not [d for d in definitions if "lease_until" in d or "heartbeat_at" in d]
    assert options is not None and "fillfactor=70" in options[0]


def downgrade_to_version_15(url: str) -> None:
    """The layout of schema version 15, as a database that ran 0.2 has it."""
    for statement in (
        "DROP INDEX tenure_jobs_running",
        "CREATE INDEX tenure_jobs_running_lease ON tenure_jobs (lease_until) "
        "WHERE state = 'running'",
        "ALTER TABLE tenure_jobs RESET (fillfactor)",
        "DELETE FROM tenure_schema_version WHERE version = 16",
    ):
        execute_sql(url, statement)


def jobs_that_ended(ledger: tenure.Ledger) -> dict[str, str]:
    """One job succeeded, one failed and one cancelled: {state: job id}."""
    port = lease_port(ledger)
    ended = {
        "succeeded": ledger.submit("done", {}),
        "failed": ledger.submit("broken", {}, max_attempts=1),
        "cancelled": ledger.submit("dropped", {}),
    }
    (lease,) = port.claim_many("old", kinds=["done"], limit=1, lease_seconds=30)
    ledger.complete(lease, {"ok": True})
    (lease,) = port.claim_many("old", kinds=["broken"], limit=1, lease_seconds=30)
    ledger.fail(lease, {"code": "broken"}, retryable=False)
    ledger.cancel(ended["cancelled"])
    return ended


def test_a_fleet_upgrades_while_it_holds_leases(
    db_url: str, connect: Callable[..., tenure.Ledger]
) -> None:
    """A database at version 15 with jobs in every state and a worker renewing a lease: a
    new process migrates it (one transaction) while the renewals go on; the held lease keeps
    its token and publishes, an expired lease is reclaimed through the new index, queued and
    waiting jobs are claimed, finished jobs are untouched. The statements of both versions
    are the same: old and new processes run side by side in either order."""
    old = connect()
    downgrade_to_version_15(db_url)
    old_port = lease_port(old)
    finished = jobs_that_ended(old)
    held_id = old.submit("held", {})
    (held,) = old_port.claim_many("old", kinds=["held"], limit=1, lease_seconds=5)
    lapsing_id = old.submit("lapsing", {})
    (lapsing,) = old_port.claim_many("old", kinds=["lapsing"], limit=1, lease_seconds=0.5)
    queued_id = old.submit("next", {})
    waiting_id = old.submit("parked", {})
    execute_sql(
        db_url,
        "UPDATE tenure_jobs SET state = 'waiting', run_after = clock_timestamp(), "
        f'wait = \'{{"for": "timer", "position": 0}}\' WHERE id = \'{waiting_id}\'',
    )
    states = {name: old.get(job_id).state for name, job_id in finished.items()}
    with Renewing(old, held) as renewing:
        new = connect()  # migrates to version 16 (and later) while the old process renews
        with psycopg.connect(direct(db_url), autocommit=True) as conn:
            versions = [row[0] for row in conn.execute("SELECT version FROM tenure_schema_version")]
        assert max(versions) >= 16
        renewing.wait_for_more(3)
        claimed = claim_all(new, {queued_id, waiting_id, lapsing_id})
        assert claimed[lapsing_id].token > lapsing.token
    assert renewing.errors == []
    old.complete(held, {"kept": True})
    assert old.get(held_id).state is JobState.SUCCEEDED
    assert {name: new.get(job_id).state for name, job_id in finished.items()} == states
    for got in claimed.values():
        new.complete(got, {"ok": True})
    assert {new.get(job_id).state for job_id in claimed} == {JobState.SUCCEEDED}


class Renewing:
    """A thread renewing one lease every 50 ms, as a worker's keeper does (faster)."""

    def __init__(self, ledger: tenure.Ledger, lease: tenure.Lease) -> None:
        self.port, self.lease = lease_port(ledger), lease
        self.count, self.errors = 0, list[Exception]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Renewing:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.port.extend_many([self.lease], 5)
                self.count += 1
            except tenure.TenureError as exc:
                self.errors.append(exc)
            self._stop.wait(0.05)

    def wait_for_more(self, renewals: int, timeout: float = 10.0) -> None:
        target, deadline = self.count + renewals, time.monotonic() + timeout
        while self.count < target:
            assert time.monotonic() < deadline, "renewals stopped across the migration"
            time.sleep(0.05)


def claim_all(
    ledger: tenure.Ledger, job_ids: set[str], timeout: float = 10.0
) -> dict[str, tenure.Lease]:
    """Claim until each of `job_ids` is held (an expired lease needs a rescue claim)."""
    port, claimed = lease_port(ledger), dict[str, tenure.Lease]()
    deadline = time.monotonic() + timeout
    while set(claimed) != job_ids:
        assert time.monotonic() < deadline, f"claimed {set(claimed)} of {job_ids}"
        for got in port.claim_many(
            "new", kinds=["next", "parked", "lapsing"], limit=3, lease_seconds=30
        ):
            claimed[got.job_id] = got
        time.sleep(0.1)
    return claimed


def test_a_plain_claim_starts_after_what_its_claimer_took(
    ledger: tenure.Ledger, connect: Callable[..., tenure.Ledger]
) -> None:
    """A claim short of its limit took every claimable queued job: the claimer's next plain
    claim starts after them. A job released by another process keeps its place in the queue,
    below that floor: a plain claim does not see it, the rescue claim (a worker sends one a
    second) does, and a new submit is seen at once. A job released through the claimer's own
    store sends its claims back to the head."""
    port = lease_port(ledger)
    elsewhere = connect()
    ledger.submit_many("task", [{"n": n} for n in range(3)])
    taken = port.claim_many("w", kinds=["task"], limit=10, lease_seconds=30, rescue=False)
    assert len(taken) == 3
    elsewhere.release(taken[0])
    assert port.claim_many("w", kinds=["task"], limit=10, lease_seconds=30, rescue=False) == []
    fresh = ledger.submit("task", {"n": 3})
    (got,) = port.claim_many("w", kinds=["task"], limit=10, lease_seconds=30, rescue=False)
    assert got.job_id == fresh
    (rescued,) = port.claim_many("w", kinds=["task"], limit=10, lease_seconds=30, rescue=True)
    assert rescued.job_id == taken[0].job_id
    # Another claimer has its own floor: it starts at the head.
    elsewhere.release(rescued)
    (other,) = port.claim_many("v", kinds=["task"], limit=10, lease_seconds=30, rescue=False)
    assert other.job_id == taken[0].job_id
    ledger.release(other)
    (again,) = port.claim_many("v", kinds=["task"], limit=10, lease_seconds=30, rescue=False)
    assert again.job_id == taken[0].job_id


def claim_blocks(
    url: str, floor: int, rescue: bool, priority: int | None = None, turn: str | None = None
) -> int:
    """Shared buffers one claim of 16 jobs reads, as EXPLAIN (ANALYZE, BUFFERS) counts them
    (rolled back: nothing is claimed); with `priority`, from the position a full claim left;
    with `turn`, a shared rescue that takes that turn's row if it is due."""
    sql, params = claim_explained(["task"], floor, rescue, priority, turn)
    with psycopg.connect(direct(url)) as conn:
        row = conn.execute(
            ("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql).encode(), params
        ).fetchone()
        conn.rollback()
    assert row is not None
    plan = row[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def churn(ledger: tenure.Ledger, url: str, jobs: int) -> int:
    """Run `jobs` jobs through claim and completion, leave 50 queued; the floor a claimer
    that took the last of them holds (the first queued job's place)."""
    port = lease_port(ledger)
    for start in range(0, jobs, 250):
        count = min(250, jobs - start)
        ledger.submit_many("task", [{}] * count)
        leases = port.claim_many("churn", kinds=["task"], limit=count, lease_seconds=1)
        port.complete_many([(lease, None) for lease in leases])
    ledger.submit_many("task", [{}] * 50)
    with psycopg.connect(direct(url), autocommit=True) as conn:
        row = conn.execute("SELECT min(seq) FROM tenure_jobs WHERE state = 'queued'").fetchone()
    assert row is not None
    return int(row[0])


def test_a_plain_claim_reads_no_more_while_a_transaction_idles(
    db_url: str, connect: Callable[..., tenure.Ledger]
) -> None:
    """With a transaction idle in the database, every claimed job leaves a dead version the
    queue's index still returns. A plain claim starts at its floor and reads about as many
    buffers after 4,000 jobs as after 1,000; a rescue claim (from the head, once a second)
    reads more with each job. Counted by PostgreSQL, not timed."""
    ledger = connect()
    with psycopg.connect(direct(db_url)) as horizon:
        horizon.execute("SELECT txid_current()")
        floor = churn(ledger, db_url, 1000)
        plain_early, rescue_early = (
            claim_blocks(db_url, floor, False),
            claim_blocks(db_url, 0, True),
        )
        execute_sql(db_url, "UPDATE tenure_jobs SET state = 'cancelled' WHERE state = 'queued'")
        floor = churn(ledger, db_url, 3000)
        plain_late, rescue_late = claim_blocks(db_url, floor, False), claim_blocks(db_url, 0, True)
        horizon.rollback()
    # Measured: plain 296 -> 325 buffers, rescue 453 -> 813 (the index's pages still grow).
    assert rescue_late - rescue_early > 200, (rescue_early, rescue_late)
    assert plain_late - plain_early < (rescue_late - rescue_early) / 4, (plain_early, plain_late)


def test_a_shared_rescue_reads_the_dead_versions_only_on_its_turn(
    db_url: str, connect: Callable[..., tenure.Ledger]
) -> None:
    """With a transaction idle, a shared rescue (a fleet's workers take turns) that does not
    take its turn starts at its floor and reads about what a plain claim reads; the one that
    takes the turn reads the queue from the head, dead versions and all, as a rescue of its
    own does. Counted by PostgreSQL, not timed."""
    ledger = connect()
    execute_sql(db_url, "INSERT INTO tenure_rescue_turns (claimer, due_at) VALUES ('fleet', now())")
    with psycopg.connect(direct(db_url)) as horizon:
        horizon.execute("SELECT txid_current()")
        floor = churn(ledger, db_url, 3000)
        plain = claim_blocks(db_url, floor, False)
        with psycopg.connect(direct(db_url)) as searching:  # another claim holds the turn
            searching.execute("SELECT 1 FROM tenure_rescue_turns FOR UPDATE")
            off_turn = claim_blocks(db_url, floor, True, turn="fleet")
            searching.rollback()
        own, on_turn = (
            claim_blocks(db_url, floor, True),
            claim_blocks(db_url, floor, True, turn="fleet"),
        )
        horizon.rollback()
    # Measured: plain 324 buffers, shared off its turn 372, on its turn 718, own rescue 716.
    assert own - plain > 200, (plain, own)
    assert off_turn - plain < (own - plain) / 4, (plain, off_turn, own)
    assert on_turn - plain > (own - plain) * 3 / 4, (plain, on_turn, own)


def test_a_full_claim_keeps_its_place_and_sees_what_outranks_it(
    ledger: tenure.Ledger, connect: Callable[..., tenure.Ledger]
) -> None:
    """A claim that comes back full holds a position in the queue's order: the next plain
    claim goes on after the last job it took, and still sees a job of higher priority
    submitted since, and one of lower priority, in priority order. A job another process
    released keeps its place, before the position: the rescue claim takes it."""
    port = lease_port(ledger)
    queued = ledger.submit_many("task", [{"n": n} for n in range(40)])

    def claim(limit: int, rescue: bool = False) -> list[tenure.Lease]:
        return port.claim_many("w", kinds=["task"], limit=limit, lease_seconds=30, rescue=rescue)

    first = claim(16)
    assert [lease.job_id for lease in first] == queued[:16]
    connect().release(first[0])
    urgent = ledger.submit("task", {"n": "urgent"}, priority=5)
    assert [lease.job_id for lease in claim(16)] == [urgent, *queued[16:31]]
    later = ledger.submit("task", {"n": "later"}, priority=-1)
    assert [lease.job_id for lease in claim(16)] == [*queued[31:], later]
    assert claim(16) == []
    assert [lease.job_id for lease in claim(16, rescue=True)] == [queued[0]]
    assert ledger.list(state="queued") == []


def test_a_full_claim_in_a_deep_queue_reads_no_more_while_a_transaction_idles(
    db_url: str, connect: Callable[..., tenure.Ledger]
) -> None:
    """In a queue kept deep every claim comes back full. With a transaction idle, the claim
    from the position the last full claim left reads about as many buffers after 5,000 jobs
    were claimed from the queue's head as after 1,000; the claim from the head reads more with
    each job. Counted by PostgreSQL, not timed."""
    ledger = connect()
    port = lease_port(ledger)
    figures: list[tuple[int, int]] = []
    with psycopg.connect(direct(db_url)) as horizon:
        horizon.execute("SELECT txid_current()")
        ledger.submit_many("task", [{}] * 500)
        for jobs in (1000, 4000):
            for _ in range(jobs // 250):
                ledger.submit_many("task", [{}] * 250)
                leases = port.claim_many("churn", kinds=["task"], limit=250, lease_seconds=1)
                port.complete_many([(lease, None) for lease in leases])
            with psycopg.connect(direct(db_url), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT min(seq) FROM tenure_jobs WHERE state = 'queued'"
                ).fetchone()
            assert row is not None
            position = claim_blocks(db_url, int(row[0]), False, priority=0)
            figures.append((position, claim_blocks(db_url, 0, False)))
        horizon.rollback()
    (position_early, head_early), (position_late, head_late) = figures
    # Measured: from the position 297 -> 320 buffers, from the head 404 -> 604.
    assert head_late - head_early > 100, figures
    assert position_late - position_early < (head_late - head_early) / 4, figures


def test_a_claim_refuses_a_rescue_that_is_not_a_bool(ledger: tenure.Ledger) -> None:
    """`rescue` is True or False: "yes" or 1 is refused before anything is sent."""
    port = lease_port(ledger)
    ledger.submit("task", {})
    for wrong in ("yes", 1, None):
        with pytest.raises(tenure.InvalidArgument, match="rescue must be True or False"):
            port.claim_many("w", kinds=["task"], limit=1, rescue=wrong)  # type: ignore[arg-type]
    assert [job.attempt for job in ledger.list(state="queued")] == [0]


def test_new_jobs_land_at_the_right_edge_of_the_primary_key(
    db_url: str, ledger: tenure.Ledger
) -> None:
    """Job ids start with the time (UUID version 7): as PostgreSQL orders them, every job of a
    later submit sorts after every earlier one, so its index entries go to the last page of
    the primary key and of the events' job index instead of a random page each (which, after
    a checkpoint, writes that whole page to the WAL: bench/write_bytes.py)."""
    batches = []
    for round_ in range(3):
        batches.append(ledger.submit_many("edge", [{"round": round_, "n": n} for n in range(50)]))
        stamp = time.monotonic_ns()
        while time.monotonic_ns() - stamp < 2_000_000:  # the next submit is a later millisecond
            pass
    batches.append([ledger.submit("edge", {"one": n}) for n in range(20)])
    with psycopg.connect(direct(db_url), autocommit=True) as conn:
        ordered = [str(row[0]) for row in conn.execute("SELECT id FROM tenure_jobs ORDER BY id")]
    where = {job_id: number for number, batch in enumerate(batches) for job_id in batch}
    assert set(ordered) == set(where)
    assert [where[job_id] for job_id in ordered] == sorted(where[job_id] for job_id in ordered)
