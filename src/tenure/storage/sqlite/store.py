"""The SQLite store: the embedded default for one machine (WAL, BEGIN IMMEDIATE, own clock).

Writes run inside BEGIN IMMEDIATE after a write turn (`turns`); the transaction reads SQLite's
clock once under the write lock and hands it to every statement as `:now`. What both dialects
share (reads, the limited claim, the fence transaction) is in `storage.sql`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import (
    StoreBug,
    StoreConflict,
    StoreUnavailable,
    TenureError,
    UnsupportedDatabase,
)
from tenure.storage.base import (
    AttemptFailure,
    ClaimRequest,
    NewJob,
    NewSignal,
    Publish,
    PurgeStep,
    StageStart,
)
from tenure.storage.migrate import Track
from tenure.storage.rows import (
    Decoder,
    Row,
    expiry_detail,
    held_by,
    json_text,
    lease_from_row,
    stage_params,
    started_event,
)
from tenure.storage.seam import Params, Tx
from tenure.storage.sql import SqlStore
from tenure.storage.sqlite.room import WriteRoom
from tenure.storage.sqlite.schema import apply_migrations
from tenure.storage.sqlite.turns import WriteTurns
from tenure.storage.sqlite.tx import Q, SqliteTx
from tenure.storage.sqlite.wakers import cancel_tree, store_signal
from tenure.storage.waits import SignalOutcome
from tenure.storage.wakeup import (
    LOCAL,
    LOCAL_CANCELS,
    LOCAL_ENDED,
    CancelCallback,
    EndedCallback,
    ListeningCallback,
    WakeCallback,
    cancel_payload,
    read_cancel,
)
from tenure.types import EventType, JobState, Lease, PurgeBatch, StageKind

# Primary result codes that mean the file cannot be used now (busy, locked, I/O, full, …):
# https://sqlite.org/rescode.html. SQLITE_SCHEMA (17) is a schema change under a statement.
_UNAVAILABLE_CODES = frozenset({5, 6, 7, 8, 9, 10, 13, 14, 15, 17})
_UNUSABLE_CODES = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB
_CONSTRAINT = 19


def read_time(value: Any) -> datetime:
    """SQLite keeps times as REAL seconds since the epoch."""
    return datetime.fromtimestamp(float(value), UTC)


DECODE = Decoder(time=read_time, json=json_text)


def classify(exc: BaseException, path: str) -> TenureError | None:
    """The storage boundary: a sqlite3 error as tenure's (None: not a sqlite3 error).

    A busy, locked, unreadable or full file means the store is unavailable; a constraint
    violation is a conflict; an error in a statement (SQLITE_ERROR: no such table, a syntax
    error) or a misuse of the driver is a bug, not an outage.
    """
    if not isinstance(exc, sqlite3.Error):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    if primary in _UNUSABLE_CODES:
        return StoreUnavailable(f"SQLite database {path} is unusable: {exc}")
    if primary in _UNAVAILABLE_CODES:
        return StoreUnavailable(f"SQLite database {path}: {exc}")
    if primary == _CONSTRAINT:
        return StoreConflict(f"SQLite database {path} refused a write: {exc}")
    return StoreBug(f"SQLite database {path} could not run a statement: {exc}")


def path_from_url(url: str) -> str:
    """`sqlite:///rel.db` → `rel.db`; `sqlite:////abs/x.db` → `/abs/x.db`."""
    rest = url.removeprefix("sqlite://").split("?", 1)[0]
    path = rest[1:] if rest.startswith("/") else rest
    if not path or path == ":memory:":
        raise UnsupportedDatabase(
            "a SQLite URL needs a file path, e.g. sqlite:///tenure.db or sqlite:////tmp/t.db "
            "(several connections share the file, so :memory: cannot work)"
        )
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise UnsupportedDatabase(f"the folder {parent} for the SQLite file does not exist")
    return path


# The fields of each job of a `submit_many` batch, in the order its query reads them.
_BATCH_FIELDS = ("id", "payload_sha256", "payload_json", "detail_json", "variant", "held")


class SqliteStore(SqlStore):
    """A small pool of connections to one WAL database file.

    Connections are reused across threads (one at a time each): a worker that runs every job
    on a new thread must not open a connection per job.
    """

    decode = DECODE
    parallel_writes = False

    def __init__(self, url: str, *, timeout: float = 5.0, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self.path = path_from_url(url)
        self._where = str(Path(self.path).resolve())
        self._timeout = timeout
        self._turns = WriteTurns(self.path, timeout)
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.connections_opened = 0
        self._closed = False
        self._room = WriteRoom(self._where)

    @property
    def where(self) -> str:
        """The database in words for messages (no password)."""
        return f"SQLite at {self._where}"

    # -- connections and the dialect seam (see storage.sql) -------------------------------

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        """An idle connection (or a new one) for the duration of the block."""
        with self._lock:
            if self._closed:
                raise StoreUnavailable("this ledger is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._open()
        try:
            yield conn
        finally:
            with self._lock:
                if self._closed:
                    conn.close()
                else:
                    self._idle.append(conn)

    def _open(self) -> sqlite3.Connection:
        with self._translate():
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
            self._enable_wal(conn)
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        with self._lock:
            self.connections_opened += 1
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL. The switch needs the file to itself and ignores the busy handler, so
        processes opening a new file together retry it until the store's timeout."""
        deadline = self._clock.monotonic() + self._timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or self._clock.monotonic() > deadline:
                    raise
                self._clock.sleep(0.005)

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            error = classify(exc, self.path)
            assert error is not None
            raise error from exc

    @contextmanager
    def _transaction(self) -> Iterator[SqliteTx]:
        """BEGIN IMMEDIATE; the clock is read once the write lock is held. What the
        transaction made known is told once it has committed and the write turn is passed on."""
        with self._conn() as conn, self._translate(), self._room.noting(), self._turns.hold():
            conn.execute("BEGIN IMMEDIATE")
            try:
                tx = SqliteTx(conn, float(conn.execute(Q["now"]).fetchone()[0]))
                yield tx
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        self._tell(tx)

    def write_refusal(self) -> str | None:
        """Why writes fail now (a full disk; see `WriteRoom`), or None."""
        return self._room.refusal()

    def _read_rows(self, name: str, params: Params | None = None) -> Sequence[Row]:
        with self._translate(), self._conn() as conn:
            return conn.execute(Q[name], params or {}).fetchall()

    def _write_rows(self, name: str, params: Params | None = None) -> Sequence[Row]:
        with self._transaction() as tx:
            return tx.rows(name, params)

    def _array(self, values: Sequence[str] | None) -> str | None:
        return None if values is None else json.dumps(list(values))

    # -- schema ------------------------------------------------------------------------------

    def migrate(self, only: Track | None = None) -> list[int]:
        """Apply missing migrations (with `only`, one track's) inside one BEGIN IMMEDIATE (the
        lock)."""
        with self._transaction() as tx:
            return apply_migrations(tx, only)

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, job: NewJob) -> bool:
        """Insert unless the tenant's key exists; the event goes in the same transaction."""
        with self._transaction() as tx:
            row = tx.one(
                "submit",
                {
                    "id": job.id,
                    "kind": job.kind,
                    "tenant": job.tenant,
                    "max_attempts": job.max_attempts,
                    "idempotency_key": job.idempotency_key,
                    "payload": job.payload_json,
                    "payload_sha256": job.payload_sha256,
                    "run_at": None if job.run_at is None else job.run_at.timestamp(),
                    "delay": job.delay_seconds,
                    "priority": job.priority,
                    "parent_id": job.parent_id,
                    "variant": job.variant,
                    "held": job.held,
                    "labels": job.labels_json,
                    "traceparent": job.traceparent,
                    "principal": job.principal,
                    "budget": job.budget_json,
                },
            )
            if row is None:
                return False
            tx.event(job.id, EventType.JOB_SUBMITTED, 0, None, job.detail_json)
            if job.budget_json is not None:
                tx.rows("submit__budget", {"job_id": job.id, "budget": job.budget_json})
        LOCAL.publish(self._where, job.kind)
        return True

    def submit_many(self, jobs: Sequence[NewJob]) -> int:
        """Insert jobs (no keys) and their events: two statements in one transaction."""
        if not jobs:
            return 0
        first = jobs[0]
        batch = json.dumps([[getattr(job, name) for name in _BATCH_FIELDS] for job in jobs])
        with self._transaction() as tx:
            tx.rows(
                "submit_many",
                {
                    "jobs": batch,
                    "kind": first.kind,
                    "tenant": first.tenant,
                    "max_attempts": first.max_attempts,
                    "run_at": None if first.run_at is None else first.run_at.timestamp(),
                    "delay": first.delay_seconds,
                    "priority": first.priority,
                    "labels": first.labels_json,
                    "traceparent": first.traceparent,
                    "principal": first.principal,
                },
            )
            tx.rows("submit_many__events", {"jobs": batch})
        LOCAL.publish(self._where, first.kind)
        return len(jobs)

    def listen_ended(
        self, callback: EndedCallback, on_listening: ListeningCallback | None = None
    ) -> Callable[[], None]:
        """Call `callback(ids)` when jobs end in this process (other processes' are found by
        the waiters' sweep: `on_listening` is never called, as they are never heard)."""
        return LOCAL_ENDED.subscribe(self._where, lambda ids: callback(ids.split(",")))

    def listen(
        self, callback: WakeCallback, on_cancelled: CancelCallback | None = None
    ) -> Callable[[], None]:
        """Wake on submits and cancels made by this process (other processes' are found by
        polling and at the next renewal)."""
        stops = [LOCAL.subscribe(self._where, callback)]
        if on_cancelled is not None:
            cancels = on_cancelled
            stops.append(
                LOCAL_CANCELS.subscribe(self._where, lambda note: read_cancel(note, cancels))
            )

        def stop() -> None:
            for each in stops:
                each()

        return stop

    def exchange(self, publish: Publish, request: ClaimRequest) -> tuple[set[str], list[Lease]]:
        """Publish results whose lease holds, then claim, in one transaction."""
        with self._transaction() as tx:
            done: set[str] = set()
            for lease, result, detail in zip(
                publish.leases, publish.results_json, publish.details_json, strict=True
            ):
                held = held_by(lease)
                row = tx.one("exchange__complete", {**held, "result": result})
                if row is not None:
                    tx.lease_event(lease, EventType.JOB_SUCCEEDED, detail)
                    done.add(lease.job_id)
                    tx.job_ended(lease.job_id, row["parent_id"])
            claimed = self._exchange_in(tx, request) if request.limit else []
        return done, claimed

    def _tell(self, tx: SqliteTx) -> None:
        """After a commit: tell this process's workers and waiters what the transaction made
        known (other processes find it by polling and at their next renewal)."""
        for kind in dict.fromkeys(tx.claimable):
            LOCAL.publish(self._where, kind)
        for job_id, token in tx.cancelled:
            LOCAL_CANCELS.publish(self._where, cancel_payload(job_id, token))
        if tx.ended:
            LOCAL_ENDED.publish(self._where, ",".join(tx.ended))

    def _exchange_in(self, tx: Tx, request: ClaimRequest) -> list[Lease]:
        assert isinstance(tx, SqliteTx)
        owner_id, lease_seconds = request.owner_id, request.lease_seconds
        params = {
            "kinds": self._array(request.kinds),
            "only_ids": self._array(request.only_ids),
            "pinned": self._array(request.pinned),
            "pinned_kinds": self._array(request.pinned_kinds),
        }
        for row in tx.rows("exchange__exhausted", params):
            token, owner, attempt = row["fencing_token"], row["owner_id"], row["attempt"]
            last = expiry_detail(None, row["heartbeat_at"], read_time)
            expired = {"attempt": attempt, "then": "failed", **last}
            tx.event(row["id"], EventType.LEASE_EXPIRED, token, owner, expired)
            failed = {"code": "lease_expired", "attempt": attempt}
            tx.event(row["id"], EventType.JOB_FAILED, token, owner, failed)
            tx.job_ended(row["id"], row["parent_id"])
        leases: list[Lease] = []
        for candidate in tx.rows("exchange__candidates", {**params, "limit": request.limit}):
            taken = {"id": candidate["id"], "owner_id": owner_id, "lease_seconds": lease_seconds}
            claimed = tx.one("exchange__take", taken)
            assert claimed is not None  # the candidate was read in this transaction
            row = {**dict(claimed), "was_token": candidate["was_token"]}
            lease = lease_from_row(row, owner_id, lease_seconds, DECODE)
            if candidate["state"] == JobState.RUNNING:
                last = expiry_detail(
                    candidate["was_lease_until"], candidate["was_heartbeat"], read_time
                )
                expired = {"attempt": lease.attempt - 1, "then": "reclaimed", **last}
                was = candidate["was_token"], candidate["owner_id"]
                tx.event(lease.job_id, EventType.LEASE_EXPIRED, *was, expired)
            elif candidate["state"] == JobState.WAITING and lease.wait is not None:
                waited = {
                    "waited_for": lease.wait.document.get("for"),
                    "position": lease.wait.document.get("position"),
                }
                tx.lease_event(lease, EventType.JOB_RESUMED, waited)
            claim = {"attempt": lease.attempt, "lease_until": lease.lease_until.isoformat()}
            tx.lease_event(lease, EventType.JOB_CLAIMED, claim)
            leases.append(lease)
        return leases

    def extend_many(self, leases: Sequence[Lease], seconds: Sequence[float]) -> dict[str, datetime]:
        """Renew each lease still held, in one transaction."""
        renewed: dict[str, datetime] = {}
        with self._transaction() as tx:
            for lease, lease_seconds in zip(leases, seconds, strict=True):
                row = tx.one(
                    "extend_many",
                    {
                        **held_by(lease),
                        "lease_seconds": lease_seconds,
                    },
                )
                if row is not None:
                    renewed[lease.job_id] = read_time(row["lease_until"])
        return renewed

    def _guarded(
        self, name: str, lease: Lease, event: EventType | None, detail_json: str, **values: Any
    ) -> sqlite3.Row | None:
        """Run one lease-guarded UPDATE and, if it found the row, write its event."""
        with self._transaction() as tx:
            held = held_by(lease)
            row = tx.one(name, {**held, **values})
            if row is not None and event is not None:
                tx.lease_event(lease, event, detail_json)
            return row

    def save_step(self, lease: Lease, step: int, checkpoint_json: str, detail_json: str) -> bool:
        """Advance the cursor if the lease holds."""
        values = {"step": step, "checkpoint": checkpoint_json}
        saved = self._guarded("save_step", lease, EventType.STEP_SAVED, detail_json, **values)
        return saved is not None

    def fail(self, lease: Lease, failure: AttemptFailure) -> JobState | None:
        """Fail the attempt if the lease holds; the event names what became of the job."""
        with self._transaction() as tx:
            held = held_by(lease)
            error = {
                "error": failure.error_json,
                "retry_delay": failure.retry_delay,
                "token_floor": failure.token_floor,
            }
            row = tx.one("fail", {**held, **error})
            if row is None:
                return None
            state = JobState(row["state"])
            if state is JobState.FAILED:
                tx.job_ended(lease.job_id, row["parent_id"])
            detail = {
                **json.loads(failure.detail_json),
                "attempt": row["attempt"],
                "run_after": read_time(row["run_after"]).isoformat(),
            }
            retried = state is JobState.QUEUED
            event = EventType.JOB_RETRY_SCHEDULED if retried else EventType.JOB_FAILED
            tx.lease_event(lease, event, detail)
            return state

    def release(self, lease: Lease, delay: float = 0.0, detail_json: str = "{}") -> bool:
        """Give the job back if the lease holds."""
        event = EventType.JOB_RELEASED
        if self._guarded("release", lease, event, detail_json, delay=delay) is None:
            return False
        LOCAL.publish(self._where, lease.kind)
        return True

    def cancel(self, job_id: str) -> bool:
        """Cancel the job and its unfinished descendants, each token bumped, in one
        transaction; tell this process's workers."""
        with self._transaction() as tx:
            return cancel_tree(tx, job_id)

    def signal(self, signal: NewSignal) -> SignalOutcome:
        """One transaction: find the job, store the signal once, wake the job if it waits."""
        with self._transaction() as tx:
            return store_signal(tx, signal)

    def _time_param(self, when: datetime) -> Any:
        return when.timestamp()

    def _write_steps(self, tx: Tx, name: str, params: Params) -> Sequence[Row]:
        """The write, then its stage and its event (`name_stage`, `name_event`)."""
        rows = tx.rows(name, params)
        if rows:
            tx.rows(f"{name}_stage", params)
            tx.rows(f"{name}_event", params)
        return rows

    def requeue(self, job_id: str) -> bool:
        """Make a failed or cancelled job claimable again."""
        if self._operator_transition(job_id, "requeue", EventType.JOB_REQUEUED) is None:
            return False
        LOCAL.publish(self._where, "")
        return True

    def _operator_transition(self, job_id: str, query: str, event: EventType) -> int | None:
        """An operator's state change and its event (with the state it left) in one write;
        the job's token after it, or None when the state did not allow it."""
        with self._transaction() as tx:
            was = tx.one(f"{query}__was", {"job_id": job_id})
            row = tx.one(query, {"job_id": job_id})
            if row is None or was is None:
                return None
            tx.event(job_id, event, row["fencing_token"], row["owner_id"], {"was": was["state"]})
            return int(row["fencing_token"])

    def stage_start(self, lease: Lease, stage: StageStart) -> bool:
        """One transaction: check the lease, upsert the stage (and effect), write the event."""
        with self._transaction() as tx:
            held = held_by(lease)
            if tx.one("stage_start", held) is None:
                return False
            values = {**held, **stage_params(stage)}
            tx.rows("stage_start__stage", values)
            if stage.kind is StageKind.EFFECT:
                tx.rows("stage_start__effect", values)
            tx.lease_event(lease, started_event(stage), stage.detail_json)
            return True

    def stage_raised(self, lease: Lease, position: int, detail_json: str) -> bool:
        """One transaction: check the lease, drop the step's started record, write the event."""
        with self._transaction() as tx:
            held = held_by(lease)
            if tx.one("stage_raised", held) is None:
                return False
            tx.rows("stage_raised__stage", {"job_id": lease.job_id, "position": position})
            tx.lease_event(lease, EventType.STEP_FAILED, detail_json)
            return True

    def stage_done(
        self,
        lease: Lease,
        position: int,
        result_json: str,
        detail_json: str,
        checkpoint_json: str | None = None,
    ) -> bool:
        """One transaction: advance the cursor, store the result (and the effect's), event."""
        with self._transaction() as tx:
            held = held_by(lease)
            cursor = {**held, "position": position, "checkpoint": checkpoint_json}
            if tx.one("stage_done", cursor) is None:
                return False
            values = {"job_id": lease.job_id, "position": position, "result": result_json}
            stage = tx.one("stage_done__stage", values)
            if stage is not None and stage["kind"] == StageKind.EFFECT:
                tx.rows("stage_done__effect", {**values, "name": stage["name"]})
            tx.lease_event(lease, EventType.STEP_DONE, detail_json)
            return True

    # -- tenants and retention ---------------------------------------------------------------

    def create_tenant(self, name: str, key_id: str, key_sha256: str) -> bool:
        """The tenant and its first key in one transaction."""
        with self._transaction() as tx:
            if tx.one("create_tenant", {"tenant": name}) is None:
                return False
            key = {"tenant": name, "key_id": key_id, "key_sha256": key_sha256, "principal": None}
            return tx.one("add_api_key", key) is not None

    def purge_batch(self, step: PurgeStep) -> PurgeBatch:
        """One bounded purge step in one IMMEDIATE transaction (see the PostgreSQL query)."""
        terminal = {state.value for state in JobState if state.terminal}
        after = step.after
        with self._transaction() as tx:
            rows = tx.rows("purge_batch__scan", {"after": after, "scan": step.scan})
            cutoff, key_cutoff = tx.now - step.older_than, tx.now - step.keep_keys
            old = [
                r
                for r in rows
                if r["state"] in terminal and r["updated_at"] < cutoff and not r["parent_open"]
            ]
            doomed = [
                r["id"] for r in old if r["idempotency_key"] is None or r["updated_at"] < key_cutoff
            ]
            ids = {"ids": json.dumps(doomed)}
            counts = {
                name: tx.conn.execute(Q[f"purge_batch__{name}"], ids).rowcount
                for name in ("events", "stages", "effects", "jobs")
            }
        return PurgeBatch(
            last_seq=int(rows[-1]["seq"]) if rows else after,
            scanned=len(rows),
            reached_new=bool(rows) and float(rows[0]["created_at"]) >= cutoff,
            jobs=counts["jobs"],
            stages=counts["stages"],
            effects=counts["effects"],
            events=counts["events"],
            kept_for_keys=len(old) - len(doomed),
        )

    def close(self) -> None:
        """Close every connection (one in use closes when its block ends). Idempotent."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        self._turns.close()
