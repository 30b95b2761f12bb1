"""The PostgreSQL store: the engine a fleet of workers on many machines shares.

Each operation is one statement (data-modifying CTEs write the event beside the transition) on
an autocommit connection from a psycopg_pool pool: one round trip per operation. What both
dialects share (reads, the limited claim, the fence transaction) is in `storage.sql`.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import DictRow, dict_row

from tenure.errors import StoreUnavailable
from tenure.rates import RateClaim
from tenure.storage.base import (
    NOTHING_TO_PUBLISH,
    AttemptFailure,
    ClaimRequest,
    NewJob,
    NewSignal,
    Publish,
    PurgeStep,
    StageStart,
)
from tenure.storage.migrate import Track, load_migrations
from tenure.storage.postgres.claims import (
    ClaimFloors,
    RescueTurns,
    claim_statement,
    exchange_params,
    with_claim_variants,
)
from tenure.storage.postgres.connecting import check_listen_url, plan_connection
from tenure.storage.postgres.failures import CommitWatches, classify
from tenure.storage.postgres.listener import PostgresListener
from tenure.storage.postgres.pooling import settings_statement
from tenure.storage.postgres.refusals import POOL_NAME, ConnectRefusals
from tenure.storage.postgres.watchdog import Watchdog, sever_socket
from tenure.storage.queries import load_queries
from tenure.storage.rows import (
    Decoder,
    Row,
    held_by,
    json_value,
    lease_from_row,
    signal_params,
    stage_params,
    started_event,
)
from tenure.storage.seam import Params, Tx
from tenure.storage.sql import SqlStore
from tenure.storage.waits import SignalOutcome
from tenure.storage.wakeup import CancelCallback, EndedCallback, ListeningCallback, WakeCallback
from tenure.types import JobState, Lease, PurgeBatch

Q = with_claim_variants(load_queries(__package__ or "tenure.storage.postgres"))
_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS tenure_schema_version (
    version integer PRIMARY KEY, name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"""
# The client-side deadline sits past the server's statement_timeout, which normally fires first.
_CLIENT_GRACE_SECONDS = 0.5
# One lock per schema, so that two tenure schemas in one database migrate independently.
_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':tenure:migrate'))"


def read_time(value: Any) -> datetime:
    """PostgreSQL hands back aware datetimes; tenure speaks UTC."""
    if not isinstance(value, datetime):
        raise TypeError(f"expected a timestamp, got {type(value).__name__}")
    return value.astimezone(UTC)


DECODE = Decoder(time=read_time, json=json_value)


def _positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` with `%(name)s` placeholders numbered `$1 …` (a name used twice keeps its number),
    and the names in that order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return _NAMED.sub(number, sql), tuple(names)


_NAMED = re.compile(r"%\((\w+)\)s")
# Each query's positional form, made once: psycopg parses a named query on every execute when
# it is longer than its cache allows (4 KiB), and the claim statement is longer.
RAW = {name: _positional(sql) for name, sql in Q.items()}
# The connection's own questions (no store method of both dialects): which schema the tables
# are in (through a pooler, as set for each transaction), and a probe of the LISTEN URL.
RAW["current_schema"] = ("SELECT current_schema() AS schema", ())
RAW["notify"] = ("SELECT pg_notify($1, '')", ("channel",))
RAW["schema_versioned"] = (
    "SELECT to_regclass('tenure_schema_version') IS NOT NULL AS present",
    (),
)
RAW["schema_versions"] = ("SELECT version FROM tenure_schema_version", ())
RAW["write_refusal"] = (
    "SELECT pg_is_in_recovery() AS recovery, current_setting('transaction_read_only') AS ro",
    (),
)


def _rows(conn: psycopg.Connection[DictRow], name: str, params: Params | None) -> list[DictRow]:
    sql, names = RAW[name]
    cursor = psycopg.RawCursor(conn, row_factory=dict_row)
    cursor.execute(sql, [params[key] for key in names] if params else None)
    return cursor.fetchall() if cursor.description is not None else []


class _PostgresTx:
    """Named queries on the connection of one open transaction."""

    def __init__(self, conn: psycopg.Connection[DictRow]) -> None:
        self._conn = conn

    def rows(self, name: str, params: Params | None = None) -> Sequence[Row]:
        return _rows(self._conn, name, params)


class PostgresStore(SqlStore):
    """A pool of autocommit connections; one statement per operation."""

    decode = DECODE
    parallel_writes = True

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        pool_size: int = 4,
        listen_url: str | None = None,
    ) -> None:
        self._timeout = timeout
        self._plan = plan_connection(url, timeout, listen_url)
        self._where = self._plan.where
        self._settings = settings_statement(list(self._plan.local_settings))
        self._watchdog = Watchdog(_sever_connection)
        self._commits = CommitWatches(self._where)
        self._checking = False
        self._checking_lock = threading.Lock()
        self._floors = ClaimFloors()
        self._rescue_turns = RescueTurns(self._write_rows)
        self._refusals = ConnectRefusals(self._where)
        connection_options: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
        if not self._plan.prepare:
            connection_options["prepare_threshold"] = None
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[DictRow]] = (
            psycopg_pool.ConnectionPool(
                self._plan.conninfo,
                min_size=1,
                max_size=max(1, pool_size),
                kwargs=connection_options,
                connection_class=self._refusals.connection_class(),
                timeout=timeout,
                open=False,
                name=POOL_NAME,
                configure=self._commits.watch,
            )
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise self._refusals.unavailable(exc, timeout) from exc
        try:
            self._schema = str(self._read_rows("current_schema")[0]["schema"])
            if listen_url is not None:
                check_listen_url(self._plan, self._notify, timeout)
        except BaseException:
            self.close()
            raise

    @property
    def pooled(self) -> bool:
        """True through a transaction pooler: settings per transaction, no session state."""
        return self._plan.pooled

    def _notify(self, channel: str) -> None:
        self._write_rows("notify", {"channel": channel})

    def write_refusal(self) -> str | None:
        """Why the server the pool reaches cannot write now (a standby in recovery, or
        read-only transactions), asked of it: a URL of one host, or a pooler, may lead to a
        standby, which answers reads as if nothing were wrong."""
        row = self._read_rows("write_refusal")[0]
        if row["recovery"]:
            return "the server is a standby (in recovery): writes need the primary"
        if row["ro"] == "on":
            return "the server's transactions are read-only (default_transaction_read_only)"
        return None

    @property
    def where(self) -> str:
        """The database in words for messages (no password)."""
        return self._where

    # -- the dialect seam (see storage.sql) ------------------------------------------------

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except psycopg_pool.PoolTimeout as exc:
            self._check_pool_soon()
            raise self._refusals.unavailable(exc, self._timeout) from exc
        except Exception as exc:
            error = classify(exc, self._where)
            if error is None:
                raise
            if isinstance(error, StoreUnavailable):
                self._check_pool_soon()
            raise error from exc

    def _check_pool_soon(self) -> None:
        """After a connection error, test the idle connections in the background: a network
        cut breaks them all, and each would otherwise fail one operation before its discard."""
        with self._checking_lock:
            if self._checking:
                return
            self._checking = True

        def check() -> None:
            try:
                self._pool.check()
            except (psycopg.Error, psycopg_pool.PoolClosed):
                pass
            finally:
                with self._checking_lock:
                    self._checking = False

        threading.Thread(target=check, name="tenure-pg-pool-check", daemon=True).start()

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[DictRow]]:
        """A pooled connection, translated errors, and a client-side deadline."""
        deadline = self._timeout + _CLIENT_GRACE_SECONDS
        with (
            self._translate(),
            self._pool.connection() as conn,
            self._watchdog.deadline(deadline, conn),
            self._commits.confirmed(conn),
        ):
            yield conn

    def _read_rows(self, name: str, params: Params | None = None) -> Sequence[Row]:
        with self._connection() as conn:
            if not self._plan.pooled:
                return _rows(conn, name, params)
            with conn.transaction():
                self._set_locally(conn)
                return _rows(conn, name, params)

    def _set_locally(self, conn: psycopg.Connection[DictRow]) -> None:
        """Through a pooler: this transaction's settings (no session keeps them)."""
        text, values = self._settings
        psycopg.RawCursor(conn).execute(text, values)

    # Autocommit: a single statement is its own transaction.
    _write_rows = _read_rows

    @contextmanager
    def _transaction(self) -> Iterator[_PostgresTx]:
        with self._connection() as conn, conn.transaction():
            if self._plan.pooled:
                self._set_locally(conn)
            yield _PostgresTx(conn)

    def _array(self, values: Sequence[str] | None) -> list[str] | None:
        return None if values is None else list(values)

    def _limited_claim_lock(self, tx: Tx) -> None:
        tx.rows("limited_claim__lock")

    # -- schema ------------------------------------------------------------------------------

    def migrate(self, only: Track | None = None) -> list[int]:
        """Apply missing migrations (with `only`, one track's) in one transaction under an
        advisory lock."""
        applied_now: list[int] = []
        package = __package__ or "tenure.storage.postgres"
        if not self._missing_migrations(package, only):
            # Up to date: no lock and no DDL, which a standby refuses: one can be opened.
            return applied_now
        with (
            self._translate(),
            self._pool.connection() as conn,
            self._commits.confirmed(conn),
            conn.transaction(),
        ):
            if self._plan.pooled:
                self._set_locally(conn)
            conn.execute(_MIGRATION_LOCK)
            conn.execute(_VERSION_TABLE)
            done = {
                row["version"] for row in conn.execute("SELECT version FROM tenure_schema_version")
            }
            for migration in load_migrations(package, only):
                if migration.version in done:
                    continue
                # Our own packaged file, never user input.
                conn.execute(migration.sql.encode())
                conn.execute(
                    "INSERT INTO tenure_schema_version (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied_now.append(migration.version)
        return applied_now

    def _missing_migrations(self, package: str, only: Track | None) -> bool:
        """Whether any migration is not applied yet: read without a lock (one transaction)."""
        with self._transaction() as tx:
            if not tx.rows("schema_versioned")[0]["present"]:
                return True
            done = {row["version"] for row in tx.rows("schema_versions")}
        return any(m.version not in done for m in load_migrations(package, only))

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, job: NewJob) -> bool:
        """Insert unless the tenant's key exists; one statement with its event."""
        rows = self._write_rows(
            "submit",
            {
                "id": job.id,
                "kind": job.kind,
                "tenant": job.tenant,
                "max_attempts": job.max_attempts,
                "idempotency_key": job.idempotency_key,
                "payload": job.payload_json,
                "payload_sha256": job.payload_sha256,
                "run_at": job.run_at,
                "delay": job.delay_seconds,
                "priority": job.priority,
                "detail": job.detail_json,
                "parent_id": job.parent_id,
                "variant": job.variant,
                "held": job.held,
                "labels": job.labels_json,
                "traceparent": job.traceparent,
                "principal": job.principal,
                "budget": job.budget_json,
            },
        )
        return bool(rows)

    def submit_many(self, jobs: Sequence[NewJob]) -> int:
        """Insert jobs that share kind, tenant and schedule (no keys): one statement."""
        if not jobs:
            return 0
        first = jobs[0]
        rows = self._write_rows(
            "submit_many",
            {
                "ids": [job.id for job in jobs],
                "payloads": [job.payload_json for job in jobs],
                "payload_sha256s": [job.payload_sha256 for job in jobs],
                "details": [job.detail_json for job in jobs],
                "variants": [job.variant for job in jobs],
                "helds": [job.held for job in jobs],
                "kind": first.kind,
                "tenant": first.tenant,
                "max_attempts": first.max_attempts,
                "run_at": first.run_at,
                "delay": first.delay_seconds,
                "priority": first.priority,
                "labels": first.labels_json,
                "traceparent": first.traceparent,
                "principal": first.principal,
            },
        )
        return int(rows[0]["inserted"])

    def listen(
        self, callback: WakeCallback, on_cancelled: CancelCallback | None = None
    ) -> Callable[[], None]:
        """LISTEN on one connection for claimable kinds (and cancels); returns the stop.
        Through a pooler without a LISTEN URL: nothing to hear (workers poll)."""
        if self._plan.listen_conninfo is None:
            return _nothing
        return PostgresListener(
            self._plan.listen_conninfo, self._schema, callback, on_cancelled, wait=self._timeout
        ).close

    def listen_ended(
        self, callback: EndedCallback, on_listening: ListeningCallback | None = None
    ) -> Callable[[], None]:
        """LISTEN on one connection for jobs that end (and are cancelled); returns the stop.
        `on_listening(True)` each time the connection listens, `(False)` when it is lost."""
        if self._plan.listen_conninfo is None:
            return _nothing
        listener = PostgresListener(
            self._plan.listen_conninfo,
            self._schema,
            None,
            on_ended=callback,
            on_listening=on_listening,
            wait=self._timeout,
        )
        return listener.close

    def exchange(self, publish: Publish, request: ClaimRequest) -> tuple[set[str], list[Lease]]:
        """Publish results and claim in one statement."""
        rows = self._write_rows(*self._claim_call(publish, request))
        done = {row["id"] for row in rows if row["outcome"] == "completed"}
        return done, self._claimed(rows, request)

    def limited_claim(
        self, request: ClaimRequest, kind_limits: Mapping[str, int], rates: RateClaim | None = None
    ) -> list[Lease]:
        self._rescue_turns.turn_of(request)  # its row written before the transaction opens
        return super().limited_claim(request, kind_limits, rates)

    def _exchange_in(self, tx: Tx, request: ClaimRequest) -> list[Lease]:
        return self._claimed(tx.rows(*self._claim_call(NOTHING_TO_PUBLISH, request)), request)

    def _claim_call(self, publish: Publish, request: ClaimRequest) -> tuple[str, Params]:
        """The claim statement (from the claimer's floor or from the head) and its parameters."""
        floor = self._floors.floor(request)
        turn = self._rescue_turns.turn_of(request)
        return claim_statement(floor), exchange_params(publish, request, floor, turn)

    def _claimed(self, rows: Sequence[Row], request: ClaimRequest) -> list[Lease]:
        leases = [
            lease_from_row(row, request.owner_id, request.lease_seconds, DECODE)
            for row in rows
            if row["outcome"] == "claimed"
        ]
        queued = [(int(r["priority"]), int(r["seq"])) for r in rows if r["was_state"] == "queued"]
        self._floors.claimed(request, len(leases), queued)
        return leases

    def extend_many(self, leases: Sequence[Lease], seconds: Sequence[float]) -> dict[str, datetime]:
        """One UPDATE renews every lease still held."""
        if not leases:
            return {}
        held = {
            lease.job_id: [lease.owner_id, lease.token, float(s)]
            for lease, s in zip(leases, seconds, strict=True)
        }
        rows = self._write_rows(
            "extend_many",
            {"job_ids": list(held), "held": json.dumps(held, separators=(",", ":"))},
        )
        return {row["id"]: read_time(row["lease_until"]) for row in rows}

    def _guarded(self, query: str, lease: Lease, **values: Any) -> Sequence[Row]:
        held = held_by(lease)
        return self._write_rows(query, {**held, **values})

    def save_step(self, lease: Lease, step: int, checkpoint_json: str, detail_json: str) -> bool:
        """Advance the cursor if the lease holds."""
        return bool(
            self._guarded(
                "save_step", lease, step=step, checkpoint=checkpoint_json, detail=detail_json
            )
        )

    def fail(self, lease: Lease, failure: AttemptFailure) -> JobState | None:
        """Fail the attempt if the lease holds."""
        rows = self._guarded(
            "fail",
            lease,
            error=failure.error_json,
            retry_delay=failure.retry_delay,
            detail=failure.detail_json,
            token_floor=failure.token_floor,
        )
        state = JobState(rows[0]["state"]) if rows else None
        self._floors.requeued(state is JobState.QUEUED)
        return state

    def release(self, lease: Lease, delay: float = 0.0, detail_json: str = "{}") -> bool:
        """Give the job back if the lease holds."""
        released = bool(self._guarded("release", lease, delay=delay, detail=detail_json))
        return self._floors.requeued(released)

    def release_if_raised(self, job_id: str, seen: Sequence[tuple[str, str, float]]) -> bool:
        return self._floors.requeued(super().release_if_raised(job_id, seen))

    def cancel(self, job_id: str) -> bool:
        """Cancel the job and its unfinished descendants, each token bumped: one transaction
        that locks them deepest first, then one statement that cancels them."""
        with self._transaction() as tx:
            if not tx.rows("cancel__lock", {"job_id": job_id}):
                return False
            return any(row["root"] for row in tx.rows("cancel", {"job_id": job_id}))

    def signal(self, signal: NewSignal) -> SignalOutcome:
        """One statement: lock and maybe wake the job, store the signal once, its event."""
        params = {**signal_params(signal), "detail": signal.detail_json}
        payload_sha256 = signal.payload_sha256
        rows = self._write_rows("signal", params)
        if not rows:  # unknown or ended: a stored name answers as it did while the job ran
            found = self._read_rows("signal__existing", params)
            if not found:
                return SignalOutcome.NO_JOB
            same = found[0]["existing"] == payload_sha256
            return SignalOutcome.REPEATED if same else SignalOutcome.CONFLICT
        if rows[0]["inserted"]:
            return SignalOutcome.STORED
        existing = rows[0]["existing"]
        if existing is None:
            found = self._read_rows("signal__existing", params)
            existing = found[0]["existing"] if found else None
        return SignalOutcome.REPEATED if existing == payload_sha256 else SignalOutcome.CONFLICT

    def requeue(self, job_id: str) -> bool:
        """Make a failed or cancelled job claimable again."""
        return self._floors.requeued(bool(self._write_rows("requeue", {"job_id": job_id})))

    def stage_start(self, lease: Lease, stage: StageStart) -> bool:
        """One statement: check the lease, upsert the stage (and effect), write the event."""
        return bool(
            self._guarded(
                "stage_start",
                lease,
                **stage_params(stage),
                event=started_event(stage),
                detail=stage.detail_json,
            )
        )

    def stage_raised(self, lease: Lease, position: int, detail_json: str) -> bool:
        """One statement: check the lease, drop the step's started record, write the event."""
        return bool(self._guarded("stage_raised", lease, position=position, detail=detail_json))

    def stage_done(
        self,
        lease: Lease,
        position: int,
        result_json: str,
        detail_json: str,
        checkpoint_json: str | None = None,
    ) -> bool:
        """One statement: advance the cursor, store the result (and the effect's), the event."""
        return bool(
            self._guarded(
                "stage_done",
                lease,
                position=position,
                result=result_json,
                detail=detail_json,
                checkpoint=checkpoint_json,
            )
        )

    # -- tenants and retention ---------------------------------------------------------------

    def create_tenant(self, name: str, key_id: str, key_sha256: str) -> bool:
        """The tenant and its first key in one statement."""
        params = {"tenant": name, "key_id": key_id, "key_sha256": key_sha256}
        return bool(self._write_rows("create_tenant", params))

    def purge_batch(self, step: PurgeStep) -> PurgeBatch:
        """One bounded purge step: one statement."""
        row = self._write_rows("purge_batch", asdict(step))[0]
        return PurgeBatch(
            last_seq=int(row["last_seq"]),
            scanned=int(row["scanned"]),
            reached_new=bool(row["reached_new"]),
            jobs=int(row["jobs"]),
            stages=int(row["stages"]),
            effects=int(row["effects"]),
            events=int(row["events"]),
            kept_for_keys=int(row["kept_for_keys"]),
        )

    def close(self) -> None:
        """Close the pool and stop the watchdog. Idempotent."""
        self._pool.close()
        self._watchdog.stop()


def _nothing() -> None:
    """The stop of a listener that never started."""


def _sever_connection(conn: object) -> None:
    if isinstance(conn, psycopg.Connection) and not conn.closed:
        try:
            fileno = conn.pgconn.socket
        except psycopg.OperationalError:
            return
        sever_socket(fileno)
