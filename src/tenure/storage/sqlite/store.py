"""The SQLite store: the embedded default for one machine (WAL, BEGIN IMMEDIATE, own clock)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tenure.errors import StoreUnavailable, UnsupportedDatabase
from tenure.storage.base import (
    ApiKeyRecord,
    EventTotals,
    FenceRecord,
    KeyedJob,
    NewJob,
    QueueFigure,
    TenantRecord,
)
from tenure.storage.limits import WINDOW_PER_SLOT, LimitPlan
from tenure.storage.migrate import load_migrations
from tenure.storage.queries import load_queries
from tenure.storage.rows import (
    Decoder,
    api_key_from_row,
    event_from_row,
    event_totals_from_row,
    fence_record_from_row,
    job_from_row,
    json_text,
    lease_from_row,
    queue_figure_from_row,
    stage_from_row,
    tenant_from_row,
)
from tenure.storage.sqlite.turns import WriteTurns
from tenure.storage.wakeup import LOCAL, WakeCallback
from tenure.types import Event, Job, JobState, Lease, PurgeBatch, Stage, StageKind

Q = load_queries(__package__ or "tenure.storage.sqlite")
_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS tenure_schema_version (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"""


def read_time(value: Any) -> datetime:
    """SQLite keeps times as REAL seconds since the epoch."""
    return datetime.fromtimestamp(float(value), UTC)


DECODE = Decoder(time=read_time, json=json_text)


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


def _by(by_tenant: bool) -> dict[str, Any]:
    return {"by_tenant": 1 if by_tenant else 0}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class SqliteStore:
    """A small pool of connections to one WAL database file.

    Connections are reused across threads (one at a time each): a worker that runs every job
    on a new thread must not open a connection per job.
    """

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.path = path_from_url(url)
        self._where = str(Path(self.path).resolve())
        self._timeout = timeout
        self._turns = WriteTurns(self.path, timeout)
        self._idle: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- connections and transactions -------------------------------------------------------

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
            self._all.append(conn)
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL. The switch needs the file to itself and ignores the busy handler, so
        processes opening a new file together retry it until the store's timeout."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"SQLite database {self.path}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreUnavailable(f"SQLite database {self.path} is unusable: {exc}") from exc

    @contextmanager
    def _write(self) -> Iterator[tuple[sqlite3.Connection, float]]:
        """BEGIN IMMEDIATE; yield the connection and the clock read under the write lock."""
        with self._conn() as conn, self._translate(), self._turns.hold():
            conn.execute("BEGIN IMMEDIATE")
            try:
                now = float(conn.execute(Q["now"]).fetchone()[0])
                yield conn, now
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _read(self, name: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        with self._translate(), self._conn() as conn:
            return conn.execute(Q[name], params).fetchall()

    @staticmethod
    def _event(
        conn: sqlite3.Connection,
        now: float,
        job_id: str,
        type: str,
        token: int | None,
        owner_id: str | None,
        detail: dict[str, Any] | str,
    ) -> None:
        detail_json = detail if isinstance(detail, str) else _dumps(detail)
        conn.execute(
            Q["insert_event"],
            {
                "job_id": job_id,
                "type": type,
                "now": now,
                "token": token,
                "owner_id": owner_id,
                "detail": detail_json,
            },
        )

    # -- schema ------------------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply missing migrations inside one BEGIN IMMEDIATE (the lock)."""
        applied_now: list[int] = []
        with self._write() as (conn, now):
            conn.execute(_VERSION_TABLE)
            done = {row[0] for row in conn.execute("SELECT version FROM tenure_schema_version")}
            for migration in load_migrations(__package__ or "tenure.storage.sqlite"):
                if migration.version in done:
                    continue
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO tenure_schema_version (version, name, applied_at) "
                    "VALUES (?, ?, ?)",
                    (migration.version, migration.name, now),
                )
                applied_now.append(migration.version)
        return applied_now

    def now(self) -> datetime:
        """SQLite's clock (the clock of the machine holding the file)."""
        return read_time(self._read("now", {})[0][0])

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, job: NewJob) -> bool:
        """Insert unless the tenant's key exists; the event goes in the same transaction."""
        with self._write() as (conn, now):
            if not self._insert_job(conn, now, job):
                return False
        LOCAL.publish(self._where, job.kind)
        return True

    def submit_many(self, jobs: Sequence[NewJob]) -> int:
        """Insert jobs (no keys) and their events in one transaction."""
        if not jobs:
            return 0
        with self._write() as (conn, now):
            for job in jobs:
                self._insert_job(conn, now, job)
        LOCAL.publish(self._where, jobs[0].kind)
        return len(jobs)

    def _insert_job(self, conn: sqlite3.Connection, now: float, job: NewJob) -> bool:
        """The job's row and its `job_submitted` event; False if its key was taken."""
        row = conn.execute(
            Q["submit"],
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
                "now": now,
            },
        ).fetchone()
        if row is None:
            return False
        self._event(conn, now, job.id, "job_submitted", 0, None, job.detail_json)
        return True

    def listen(self, callback: WakeCallback) -> Callable[[], None]:
        """Wake on submits made by this process (other processes are found by polling)."""
        return LOCAL.subscribe(self._where, callback)

    def find_by_key(self, tenant: str, idempotency_key: str) -> KeyedJob | None:
        """The job holding the key, if any."""
        rows = self._read("find_by_key", {"tenant": tenant, "idempotency_key": idempotency_key})
        if not rows:
            return None
        return KeyedJob(rows[0]["id"], rows[0]["kind"], rows[0]["payload_sha256"])

    def claim(
        self, owner_id: str, kinds: Sequence[str] | None, lease_seconds: float, limit: int
    ) -> list[Lease]:
        """Settle expired leases, then take up to `limit` jobs, in one IMMEDIATE transaction."""
        with self._write() as (conn, now):
            return self._claim_in(conn, now, owner_id, kinds, lease_seconds, limit)

    def exchange(
        self,
        leases: Sequence[Lease],
        results_json: Sequence[str],
        details_json: Sequence[str],
        owner_id: str,
        kinds: Sequence[str] | None,
        lease_seconds: float,
        limit: int,
    ) -> tuple[set[str], list[Lease]]:
        """`complete_many` and `claim` in one transaction."""
        with self._write() as (conn, now):
            done = self._complete_in(conn, now, leases, results_json, details_json)
            claimed = self._claim_in(conn, now, owner_id, kinds, lease_seconds, limit)
        return done, claimed

    def limited_claim(
        self,
        owner_id: str,
        kinds: Sequence[str] | None,
        lease_seconds: float,
        limit: int,
        kind_limits: Mapping[str, int],
    ) -> list[Lease]:
        """A claim within the tenants' and kinds' concurrency limits (see storage.limits)."""
        kinds_json = None if kinds is None else json.dumps(list(kinds))
        with self._write() as (conn, now):
            tenant_limits = {
                row["name"]: int(row["max_running"])
                for row in conn.execute(Q["tenant_limits"]).fetchall()
            }
            running = conn.execute(Q["running_counts"], {"now": now}).fetchall()
            plan = LimitPlan.of(tenant_limits, kind_limits, running)
            window = conn.execute(
                Q["limited_window"],
                {
                    "now": now,
                    "kinds": kinds_json,
                    "full_tenants": json.dumps(plan.full_tenants),
                    "full_kinds": json.dumps(plan.full_kinds),
                    "window": limit * WINDOW_PER_SLOT,
                },
            ).fetchall()
            chosen = plan.choose(window, limit)
            if not chosen:
                return []
            return self._claim_in(
                conn, now, owner_id, kinds, lease_seconds, len(chosen), json.dumps(chosen)
            )

    def tenant_limits(self) -> dict[str, int]:
        """Every tenant's concurrency limit."""
        return {row["name"]: int(row["max_running"]) for row in self._read("tenant_limits", {})}

    def set_tenant_limit(self, tenant: str, limit: int | None) -> None:
        """Set (or with None, remove) a tenant's concurrency limit."""
        with self._write() as (conn, _now):
            if limit is None:
                conn.execute(Q["clear_tenant_limit"], {"name": tenant})
            else:
                conn.execute(Q["set_tenant_limit"], {"name": tenant, "n": limit})

    def _claim_in(
        self,
        conn: sqlite3.Connection,
        now: float,
        owner_id: str,
        kinds: Sequence[str] | None,
        lease_seconds: float,
        limit: int,
        only_ids: str | None = None,
    ) -> list[Lease]:
        kinds_json = None if kinds is None else json.dumps(list(kinds))
        leases: list[Lease] = []
        params = {"now": now, "kinds": kinds_json, "only_ids": only_ids}
        for row in conn.execute(Q["claim_exhausted"], params).fetchall():
            token, owner, attempt = row["fencing_token"], row["owner_id"], row["attempt"]
            self._event(
                conn,
                now,
                row["id"],
                "lease_expired",
                token,
                owner,
                {"attempt": attempt, "then": "failed"},
            )
            self._event(
                conn,
                now,
                row["id"],
                "job_failed",
                token,
                owner,
                {"code": "lease_expired", "attempt": attempt},
            )
        candidates = conn.execute(Q["claim_candidates"], {**params, "limit": limit}).fetchall()
        for candidate in candidates:
            row = conn.execute(
                Q["claim_take"],
                {
                    "id": candidate["id"],
                    "owner_id": owner_id,
                    "now": now,
                    "lease_seconds": lease_seconds,
                },
            ).fetchone()
            lease = lease_from_row(row, owner_id, lease_seconds, DECODE)
            if candidate["state"] == JobState.RUNNING:
                self._event(
                    conn,
                    now,
                    lease.job_id,
                    "lease_expired",
                    lease.token - 1,
                    candidate["owner_id"],
                    {"attempt": lease.attempt - 1, "then": "reclaimed"},
                )
            self._event(
                conn,
                now,
                lease.job_id,
                "job_claimed",
                lease.token,
                owner_id,
                {"attempt": lease.attempt, "lease_until": lease.lease_until.isoformat()},
            )
            leases.append(lease)
        return leases

    def extend_many(self, leases: Sequence[Lease], seconds: Sequence[float]) -> dict[str, datetime]:
        """Renew each lease still held, in one transaction."""
        renewed: dict[str, datetime] = {}
        with self._write() as (conn, now):
            for lease, lease_seconds in zip(leases, seconds, strict=True):
                row = conn.execute(
                    Q["extend"],
                    {
                        "job_id": lease.job_id,
                        "owner_id": lease.owner_id,
                        "token": lease.token,
                        "now": now,
                        "lease_seconds": lease_seconds,
                    },
                ).fetchone()
                if row is not None:
                    renewed[lease.job_id] = read_time(row["lease_until"])
        return renewed

    def _guarded(
        self, name: str, lease: Lease, event: str | None, detail_json: str, **values: Any
    ) -> sqlite3.Row | None:
        """Run one lease-guarded UPDATE and, if it found the row, write its event."""
        with self._write() as (conn, now):
            row: sqlite3.Row | None = conn.execute(
                Q[name],
                {
                    "job_id": lease.job_id,
                    "owner_id": lease.owner_id,
                    "token": lease.token,
                    "now": now,
                    **values,
                },
            ).fetchone()
            if row is not None and event is not None:
                self._event(
                    conn, now, lease.job_id, event, lease.token, lease.owner_id, detail_json
                )
            return row

    def save_step(self, lease: Lease, step: int, checkpoint_json: str, detail_json: str) -> bool:
        """Advance the cursor if the lease holds."""
        return (
            self._guarded(
                "save_step", lease, "step_saved", detail_json, step=step, checkpoint=checkpoint_json
            )
            is not None
        )

    def complete(self, lease: Lease, result_json: str, detail_json: str) -> bool:
        """Succeed the job if the lease holds."""
        return (
            self._guarded("complete", lease, "job_succeeded", detail_json, result=result_json)
            is not None
        )

    def complete_many(
        self, leases: Sequence[Lease], results_json: Sequence[str], details_json: Sequence[str]
    ) -> set[str]:
        """Succeed every job whose lease holds, in one transaction; return their ids."""
        if not leases:
            return set()
        with self._write() as (conn, now):
            return self._complete_in(conn, now, leases, results_json, details_json)

    def _complete_in(
        self,
        conn: sqlite3.Connection,
        now: float,
        leases: Sequence[Lease],
        results_json: Sequence[str],
        details_json: Sequence[str],
    ) -> set[str]:
        done: set[str] = set()
        for lease, result_json, detail_json in zip(leases, results_json, details_json, strict=True):
            row = conn.execute(
                Q["complete"],
                {
                    "job_id": lease.job_id,
                    "owner_id": lease.owner_id,
                    "token": lease.token,
                    "now": now,
                    "result": result_json,
                },
            ).fetchone()
            if row is not None:
                self._event(
                    conn,
                    now,
                    lease.job_id,
                    "job_succeeded",
                    lease.token,
                    lease.owner_id,
                    detail_json,
                )
                done.add(lease.job_id)
        return done

    def fail(
        self, lease: Lease, error_json: str, retry_delay: float | None, detail_json: str
    ) -> JobState | None:
        """Fail the attempt if the lease holds; the event names what became of the job."""
        with self._write() as (conn, now):
            row = conn.execute(
                Q["fail"],
                {
                    "job_id": lease.job_id,
                    "owner_id": lease.owner_id,
                    "token": lease.token,
                    "now": now,
                    "error": error_json,
                    "retry_delay": retry_delay,
                },
            ).fetchone()
            if row is None:
                return None
            state = JobState(row["state"])
            detail = {
                **json.loads(detail_json),
                "attempt": row["attempt"],
                "run_after": read_time(row["run_after"]).isoformat(),
            }
            event = "job_retry_scheduled" if state is JobState.QUEUED else "job_failed"
            self._event(conn, now, lease.job_id, event, lease.token, lease.owner_id, detail)
            return state

    def release(self, lease: Lease) -> bool:
        """Give the job back if the lease holds."""
        if self._guarded("release", lease, "job_released", "{}") is None:
            return False
        LOCAL.publish(self._where, lease.kind)
        return True

    def cancel(self, job_id: str) -> bool:
        """Cancel and bump the token in one write."""
        return self._operator_transition(job_id, "cancel", "job_cancelled")

    def requeue(self, job_id: str) -> bool:
        """Make a failed or cancelled job claimable again."""
        if not self._operator_transition(job_id, "requeue", "job_requeued"):
            return False
        LOCAL.publish(self._where, "")
        return True

    def _operator_transition(self, job_id: str, query: str, event: str) -> bool:
        """An operator's state change and its event (with the state it left) in one write."""
        with self._write() as (conn, now):
            was = conn.execute(Q["state_of"], {"job_id": job_id}).fetchone()
            row = conn.execute(Q[query], {"job_id": job_id, "now": now}).fetchone()
            if row is None:
                return False
            self._event(
                conn,
                now,
                job_id,
                event,
                row["fencing_token"],
                row["owner_id"],
                {"was": was["state"]},
            )
            return True

    def stages(self, job_id: str) -> list[Stage]:
        """The job's recorded steps and effects."""
        return [stage_from_row(row, DECODE) for row in self._read("stages", {"job_id": job_id})]

    def stage_start(
        self,
        lease: Lease,
        position: int,
        name: str,
        kind: StageKind,
        effect_key: str | None,
        detail_json: str,
    ) -> bool:
        """One transaction: check the lease, upsert the stage (and effect), write the event."""
        with self._write() as (conn, now):
            held = {
                "job_id": lease.job_id,
                "owner_id": lease.owner_id,
                "token": lease.token,
                "now": now,
            }
            if conn.execute(Q["touch_owned"], held).fetchone() is None:
                return False
            values = {
                **held,
                "position": position,
                "name": name,
                "kind": kind.value,
                "effect_key": effect_key,
            }
            conn.execute(Q["stage_start"], values)
            if kind is StageKind.EFFECT:
                conn.execute(Q["effect_start"], values)
            event = "tool_request_started" if kind is StageKind.EFFECT else "step_started"
            self._event(conn, now, lease.job_id, event, lease.token, lease.owner_id, detail_json)
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
        with self._write() as (conn, now):
            held = {
                "job_id": lease.job_id,
                "owner_id": lease.owner_id,
                "token": lease.token,
                "now": now,
                "position": position,
                "checkpoint": checkpoint_json,
            }
            if conn.execute(Q["advance_cursor"], held).fetchone() is None:
                return False
            values = {
                "job_id": lease.job_id,
                "position": position,
                "result": result_json,
                "now": now,
            }
            stage = conn.execute(Q["stage_done"], values).fetchone()
            if stage is not None and stage["kind"] == StageKind.EFFECT:
                conn.execute(Q["effect_done"], {**values, "name": stage["name"]})
            self._event(
                conn, now, lease.job_id, "step_done", lease.token, lease.owner_id, detail_json
            )
            return True

    def record_event(
        self, job_id: str, type: str, token: int | None, owner_id: str | None, detail_json: str
    ) -> bool:
        """Append an event in its own transaction."""
        with self._write() as (conn, now):
            row = conn.execute(
                Q["record_event"],
                {
                    "job_id": job_id,
                    "type": type,
                    "now": now,
                    "token": token,
                    "owner_id": owner_id,
                    "detail": detail_json,
                },
            ).fetchone()
            return row is not None

    def get(self, job_id: str) -> Job | None:
        """The job, or None."""
        rows = self._read("get", {"job_id": job_id})
        return job_from_row(rows[0], DECODE) if rows else None

    def list_jobs(
        self,
        state: JobState | None,
        kind: str | None,
        tenant: str | None,
        limit: int,
        after: str | None,
    ) -> list[Job]:
        """Newest first, filtered, paged by `after`."""
        rows = self._read(
            "list",
            {
                "state": None if state is None else state.value,
                "kind": kind,
                "tenant": tenant,
                "limit": limit,
                "after": after,
            },
        )
        return [job_from_row(row, DECODE) for row in rows]

    def count_by_state(self, kind: str | None, tenant: str | None) -> dict[JobState, int]:
        """How many jobs are in each state."""
        rows = self._read("count_by_state", {"kind": kind, "tenant": tenant})
        return {JobState(row["state"]): int(row["n"]) for row in rows}

    def events(self, job_id: str) -> list[Event]:
        """The job's events in order."""
        return [event_from_row(row, DECODE) for row in self._read("events", {"job_id": job_id})]

    # -- operations: figures and tenants --------------------------------------------------

    def queue_figures(self, by_tenant: bool) -> list[QueueFigure]:
        """Counts and lease figures per kind (and tenant) and state, at one clock reading."""
        return [queue_figure_from_row(r) for r in self._read("queue_figures", _by(by_tenant))]

    def event_totals(self, by_tenant: bool) -> list[EventTotals]:
        """Recovery event counts per kind (and tenant)."""
        return [event_totals_from_row(r) for r in self._read("event_totals", _by(by_tenant))]

    def create_tenant(self, name: str, key_id: str, key_sha256: str) -> bool:
        """The tenant and its first key in one transaction."""
        with self._write() as (conn, now):
            if conn.execute(Q["create_tenant"], {"tenant": name, "now": now}).fetchone() is None:
                return False
            key = {"tenant": name, "key_id": key_id, "key_sha256": key_sha256, "now": now}
            return conn.execute(Q["add_api_key"], key).fetchone() is not None

    def add_api_key(self, tenant: str, key_id: str, key_sha256: str) -> bool:
        """Another key for an existing tenant."""
        with self._write() as (conn, now):
            key = {"tenant": tenant, "key_id": key_id, "key_sha256": key_sha256, "now": now}
            return conn.execute(Q["add_api_key"], key).fetchone() is not None

    def api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id."""
        rows = self._read("api_key", {"key_id": key_id})
        return api_key_from_row(rows[0]) if rows else None

    def revoke_api_keys(self, tenant: str, key_id: str | None) -> int:
        """Revoke live keys; how many."""
        with self._write() as (conn, now):
            params = {"tenant": tenant, "key_id": key_id, "now": now}
            return len(conn.execute(Q["revoke_api_keys"], params).fetchall())

    def tenants(self) -> list[TenantRecord]:
        """Every tenant, by name."""
        return [tenant_from_row(row, DECODE) for row in self._read("tenants", {})]

    @contextmanager
    def fence_transaction(self) -> Iterator[SqliteFenceTx]:
        """BEGIN IMMEDIATE: the write lock is the scope's lock."""
        with self._write() as (conn, now):
            yield SqliteFenceTx(conn, now)

    def fence_finish(self, key: str, fence: int, result_json: str) -> bool:
        """Store the result of a running key."""
        with self._write() as (conn, now):
            row = conn.execute(
                Q["fence_finish"], {"key": key, "fence": fence, "result": result_json, "now": now}
            ).fetchone()
            return row is not None

    def fence_forget(self, key: str, fence: int) -> None:
        """Drop a running key."""
        with self._write() as (conn, _now):
            conn.execute(Q["fence_forget"], {"key": key, "fence": fence})

    def fence_lookup(self, key: str) -> FenceRecord | None:
        """The record of `key`."""
        rows = self._read("fence_lookup", {"key": key, "now": self._clock()})
        return fence_record_from_row(rows[0], DECODE) if rows else None

    def _clock(self) -> float:
        return float(self._read("now", {})[0][0])

    def purge_batch(self, after: int, scan: int, older_than: float, keep_keys: float) -> PurgeBatch:
        """One bounded purge step in one IMMEDIATE transaction (see the PostgreSQL query)."""
        terminal = {state.value for state in JobState if state.terminal}
        with self._write() as (conn, now):
            rows = conn.execute(Q["purge_scan"], {"after": after, "scan": scan}).fetchall()
            cutoff, key_cutoff = now - older_than, now - keep_keys
            old = [r for r in rows if r["state"] in terminal and r["updated_at"] < cutoff]
            doomed = [
                r["id"] for r in old if r["idempotency_key"] is None or r["updated_at"] < key_cutoff
            ]
            ids = {"ids": json.dumps(doomed)}
            counts = {
                name: conn.execute(Q[f"purge_{name}"], ids).rowcount
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
            self._all = []
        for conn in idle:
            conn.close()
        self._turns.close()


class SqliteFenceTx:
    """Fence decision steps inside one BEGIN IMMEDIATE transaction."""

    def __init__(self, conn: sqlite3.Connection, now: float) -> None:
        self._conn = conn
        self._now = now

    def highest(self, scope: str) -> int:
        """The scope's highest accepted fence (0 for a new scope)."""
        self._conn.execute(Q["fence_lock_scope"], {"scope": scope, "now": self._now})
        return int(self._conn.execute(Q["fence_highest"], {"scope": scope}).fetchone()[0])

    def get(self, key: str) -> FenceRecord | None:
        """The record of `key`."""
        row = self._conn.execute(Q["fence_get"], {"key": key, "now": self._now}).fetchone()
        return None if row is None else fence_record_from_row(row, DECODE)

    def begin(self, key: str, scope: str, fence: int) -> None:
        """Mark `key` running under `fence`."""
        self._conn.execute(
            Q["fence_begin"], {"key": key, "scope": scope, "fence": fence, "now": self._now}
        )

    def raise_highest(self, scope: str, fence: int) -> None:
        """highest := max(highest, fence)."""
        self._conn.execute(Q["fence_raise"], {"scope": scope, "fence": fence, "now": self._now})


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements (executescript would commit our transaction)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statement = buffer.strip()
            buffer = ""
            if statement.strip(";").strip():
                yield statement
    if buffer.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buffer.splitlines()
    ):
        raise ValueError("migration ends with an incomplete statement")
