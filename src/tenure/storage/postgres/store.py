"""The PostgreSQL store: the engine a fleet of workers on many machines shares.

Each operation is one statement (data-modifying CTEs write the event beside the transition) on
an autocommit connection from a psycopg_pool pool: one round trip per operation.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, LiteralString

import psycopg
import psycopg_pool
from psycopg import conninfo
from psycopg.rows import DictRow, dict_row

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
from tenure.storage.postgres.watchdog import Watchdog, sever_socket
from tenure.storage.queries import load_queries
from tenure.storage.rows import (
    Decoder,
    api_key_from_row,
    event_from_row,
    event_totals_from_row,
    fence_record_from_row,
    job_from_row,
    json_value,
    lease_from_row,
    queue_figure_from_row,
    stage_from_row,
    tenant_from_row,
)
from tenure.storage.wakeup import PostgresListener, WakeCallback
from tenure.types import Event, Job, JobState, Lease, PurgeBatch, Stage, StageKind

Q = load_queries(__package__ or "tenure.storage.postgres")
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


def build_conninfo(url: str, timeout: float) -> str:
    """The URL plus client-side bounds: connect timeout, statement timeout, UTC, keepalives."""
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise UnsupportedDatabase(f"cannot parse the PostgreSQL URL: {exc}") from exc
    millis = max(1, int(timeout * 1000))
    options = str(params.get("options") or "")
    options += f" -c statement_timeout={millis} -c lock_timeout={millis} -c TimeZone=UTC"
    # psycopg prepares a statement after its fifth use; a generic plan is then reused instead
    # of a custom plan per call (a quarter millisecond of planning on each claim). Our
    # statements' plans do not depend on their parameters: partial indexes decide them.
    options += " -c plan_cache_mode=force_generic_plan"
    params.update(
        options=options.strip(),
        connect_timeout=max(1, round(timeout)),
        application_name=params.get("application_name") or "tenure",
        keepalives=1,
        keepalives_idle=max(1, round(timeout)),
        keepalives_interval=1,
        keepalives_count=max(1, round(timeout)),
        tcp_user_timeout=millis,
    )
    return conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})


def _where(url: str) -> str:
    """Host and database of a URL for messages, without the password."""
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "PostgreSQL"
    return f"PostgreSQL at {params.get('host', 'localhost')}/{params.get('dbname', '')}"


class PostgresStore:
    """A pool of autocommit connections; one statement per operation."""

    def __init__(self, url: str, *, timeout: float = 5.0, pool_size: int = 4) -> None:
        self._where = _where(url)
        self._timeout = timeout
        self._conninfo = build_conninfo(url, timeout)
        self._watchdog = Watchdog(_sever_connection)
        self._checking = False
        self._checking_lock = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[DictRow]] = (
            psycopg_pool.ConnectionPool(
                self._conninfo,
                min_size=1,
                max_size=max(1, pool_size),
                kwargs={"autocommit": True, "row_factory": dict_row},
                connection_class=psycopg.Connection[DictRow],
                timeout=timeout,
                open=False,
                name="tenure",
            )
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StoreUnavailable(
                f"cannot connect to {self._where} within {timeout:g}s: is it running, "
                "and does the URL name the right host, user and database?"
            ) from exc

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except psycopg_pool.PoolTimeout as exc:
            raise StoreUnavailable(f"no connection to {self._where}: {exc}") from exc
        except psycopg_pool.PoolClosed as exc:
            raise StoreUnavailable("this ledger is closed") from exc
        except psycopg.OperationalError as exc:
            self._check_pool_soon()
            raise StoreUnavailable(f"{self._where} did not answer: {exc}") from exc

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

    def _fetch(self, name: str, params: dict[str, Any] | None = None) -> list[DictRow]:
        deadline = self._timeout + _CLIENT_GRACE_SECONDS
        with (
            self._translate(),
            self._pool.connection() as conn,
            self._watchdog.deadline(deadline, conn),
        ):
            return conn.execute(Q[name], params).fetchall()

    # -- schema ------------------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply missing migrations in one transaction under an advisory lock."""
        applied_now: list[int] = []
        with self._translate(), self._pool.connection() as conn, conn.transaction():
            conn.execute(_MIGRATION_LOCK)
            conn.execute(_VERSION_TABLE)
            done = {
                row["version"] for row in conn.execute("SELECT version FROM tenure_schema_version")
            }
            for migration in load_migrations(__package__ or "tenure.storage.postgres"):
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

    def now(self) -> datetime:
        """PostgreSQL's clock_timestamp()."""
        return read_time(self._fetch("now")[0]["now"])

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, job: NewJob) -> bool:
        """Insert unless the tenant's key exists; one statement with its event."""
        rows = self._fetch(
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
            },
        )
        return bool(rows)

    def submit_many(self, jobs: Sequence[NewJob]) -> int:
        """Insert jobs that share kind, tenant and schedule (no keys): one statement."""
        if not jobs:
            return 0
        first = jobs[0]
        rows = self._fetch(
            "submit_many",
            {
                "ids": [job.id for job in jobs],
                "payloads": [job.payload_json for job in jobs],
                "payload_sha256s": [job.payload_sha256 for job in jobs],
                "details": [job.detail_json for job in jobs],
                "kind": first.kind,
                "tenant": first.tenant,
                "max_attempts": first.max_attempts,
                "run_at": first.run_at,
                "delay": first.delay_seconds,
                "priority": first.priority,
            },
        )
        return int(rows[0]["inserted"])

    def listen(self, callback: WakeCallback) -> Callable[[], None]:
        """Call `callback(kind)` when jobs of `kind` become claimable; returns the stop."""
        return PostgresListener(self._conninfo, callback, wait=self._timeout).close

    def find_by_key(self, tenant: str, idempotency_key: str) -> KeyedJob | None:
        """The job holding the key, if any."""
        rows = self._fetch("find_by_key", {"tenant": tenant, "idempotency_key": idempotency_key})
        if not rows:
            return None
        return KeyedJob(rows[0]["id"], rows[0]["kind"], rows[0]["payload_sha256"])

    def claim(
        self, owner_id: str, kinds: Sequence[str] | None, lease_seconds: float, limit: int
    ) -> list[Lease]:
        """One statement: settle expired leases, lock candidates SKIP LOCKED, take them."""
        return self.exchange([], [], [], owner_id, kinds, lease_seconds, limit)[1]

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
        """`complete_many` and `claim` in one statement."""
        rows = self._fetch(
            "exchange",
            {
                "job_ids": [lease.job_id for lease in leases],
                "given": _results_map(leases, results_json, details_json),
                "owner_id": owner_id,
                "kinds": None if kinds is None else list(kinds),
                "lease_seconds": lease_seconds,
                "limit": limit,
                "only_ids": None,
            },
        )
        done = {row["id"] for row in rows if row["outcome"] == "completed"}
        claimed = [
            lease_from_row(row, owner_id, lease_seconds, DECODE)
            for row in rows
            if row["outcome"] == "claimed"
        ]
        return done, claimed

    def extend_many(self, leases: Sequence[Lease], seconds: Sequence[float]) -> dict[str, datetime]:
        """One UPDATE over unnest() renews every lease still held."""
        if not leases:
            return {}
        held = {
            lease.job_id: [lease.owner_id, lease.token, float(s)]
            for lease, s in zip(leases, seconds, strict=True)
        }
        rows = self._fetch(
            "extend_many",
            {"job_ids": list(held), "held": json.dumps(held, separators=(",", ":"))},
        )
        return {row["id"]: read_time(row["lease_until"]) for row in rows}

    def _guarded(self, query: LiteralString, lease: Lease, **values: Any) -> list[DictRow]:
        return self._fetch(
            query,
            {"job_id": lease.job_id, "owner_id": lease.owner_id, "token": lease.token, **values},
        )

    def save_step(self, lease: Lease, step: int, checkpoint_json: str, detail_json: str) -> bool:
        """Advance the cursor if the lease holds."""
        return bool(
            self._guarded(
                "save_step", lease, step=step, checkpoint=checkpoint_json, detail=detail_json
            )
        )

    def complete(self, lease: Lease, result_json: str, detail_json: str) -> bool:
        """Succeed the job if the lease holds."""
        return bool(self._guarded("complete", lease, result=result_json, detail=detail_json))

    def complete_many(
        self, leases: Sequence[Lease], results_json: Sequence[str], details_json: Sequence[str]
    ) -> set[str]:
        """Succeed every job whose lease holds, in one statement; return their ids."""
        if not leases:
            return set()
        owner = leases[0].owner_id
        return self.exchange(leases, results_json, details_json, owner, [], 1.0, 0)[0]

    def fail(
        self, lease: Lease, error_json: str, retry_delay: float | None, detail_json: str
    ) -> JobState | None:
        """Fail the attempt if the lease holds."""
        rows = self._guarded(
            "fail", lease, error=error_json, retry_delay=retry_delay, detail=detail_json
        )
        return JobState(rows[0]["state"]) if rows else None

    def release(self, lease: Lease) -> bool:
        """Give the job back if the lease holds."""
        return bool(self._guarded("release", lease))

    def cancel(self, job_id: str) -> bool:
        """Cancel and bump the token in one write."""
        return bool(self._fetch("cancel", {"job_id": job_id}))

    def requeue(self, job_id: str) -> bool:
        """Make a failed or cancelled job claimable again."""
        return bool(self._fetch("requeue", {"job_id": job_id}))

    def stages(self, job_id: str) -> list[Stage]:
        """The job's recorded steps and effects."""
        return [stage_from_row(row, DECODE) for row in self._fetch("stages", {"job_id": job_id})]

    def stage_start(
        self,
        lease: Lease,
        position: int,
        name: str,
        kind: StageKind,
        effect_key: str | None,
        detail_json: str,
    ) -> bool:
        """One statement: check the lease, upsert the stage (and effect), write the event."""
        event = "tool_request_started" if kind is StageKind.EFFECT else "step_started"
        return bool(
            self._guarded(
                "stage_start",
                lease,
                position=position,
                name=name,
                kind=kind.value,
                effect_key=effect_key,
                event=event,
                detail=detail_json,
            )
        )

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

    def record_event(
        self, job_id: str, type: str, token: int | None, owner_id: str | None, detail_json: str
    ) -> bool:
        """Append an event (autocommit: its own transaction)."""
        return bool(
            self._fetch(
                "record_event",
                {
                    "job_id": job_id,
                    "type": type,
                    "token": token,
                    "owner_id": owner_id,
                    "detail": detail_json,
                },
            )
        )

    def get(self, job_id: str) -> Job | None:
        """The job, or None."""
        rows = self._fetch("get", {"job_id": job_id})
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
        rows = self._fetch(
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
        rows = self._fetch("count_by_state", {"kind": kind, "tenant": tenant})
        return {JobState(row["state"]): int(row["n"]) for row in rows}

    def events(self, job_id: str) -> list[Event]:
        """The job's events in order."""
        return [event_from_row(row, DECODE) for row in self._fetch("events", {"job_id": job_id})]

    # -- operations: figures and tenants --------------------------------------------------

    def queue_figures(self, by_tenant: bool) -> list[QueueFigure]:
        """Counts and lease figures per kind (and tenant) and state, at one clock reading."""
        rows = self._fetch("queue_figures", {"by_tenant": by_tenant})
        return [queue_figure_from_row(row) for row in rows]

    def event_totals(self, by_tenant: bool) -> list[EventTotals]:
        """Recovery event counts per kind (and tenant)."""
        rows = self._fetch("event_totals", {"by_tenant": by_tenant})
        return [event_totals_from_row(row) for row in rows]

    def create_tenant(self, name: str, key_id: str, key_sha256: str) -> bool:
        """The tenant and its first key in one statement."""
        params = {"tenant": name, "key_id": key_id, "key_sha256": key_sha256}
        return bool(self._fetch("create_tenant", params))

    def add_api_key(self, tenant: str, key_id: str, key_sha256: str) -> bool:
        """Another key for an existing tenant."""
        params = {"tenant": tenant, "key_id": key_id, "key_sha256": key_sha256}
        return bool(self._fetch("add_api_key", params))

    def api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id."""
        rows = self._fetch("api_key", {"key_id": key_id})
        return api_key_from_row(rows[0]) if rows else None

    def revoke_api_keys(self, tenant: str, key_id: str | None) -> int:
        """Revoke live keys; how many."""
        return len(self._fetch("revoke_api_keys", {"tenant": tenant, "key_id": key_id}))

    def tenants(self) -> list[TenantRecord]:
        """Every tenant, by name."""
        return [tenant_from_row(row, DECODE) for row in self._fetch("tenants")]

    @contextmanager
    def fence_transaction(self) -> Iterator[PostgresFenceTx]:
        """One transaction; the scope row's FOR UPDATE lock serialises decisions per scope."""
        deadline = self._timeout + _CLIENT_GRACE_SECONDS
        with (
            self._translate(),
            self._pool.connection() as conn,
            self._watchdog.deadline(deadline, conn),
            conn.transaction(),
        ):
            yield PostgresFenceTx(conn)

    def fence_finish(self, key: str, fence: int, result_json: str) -> bool:
        """Store the result of a running key."""
        return bool(
            self._fetch("fence_finish", {"key": key, "fence": fence, "result": result_json})
        )

    def fence_forget(self, key: str, fence: int) -> None:
        """Drop a running key."""
        with self._translate(), self._pool.connection() as conn:
            conn.execute(Q["fence_forget"], {"key": key, "fence": fence})

    def fence_lookup(self, key: str) -> FenceRecord | None:
        """The record of `key`."""
        rows = self._fetch("fence_lookup", {"key": key})
        return fence_record_from_row(rows[0], DECODE) if rows else None

    def limited_claim(
        self,
        owner_id: str,
        kinds: Sequence[str] | None,
        lease_seconds: float,
        limit: int,
        kind_limits: Mapping[str, int],
    ) -> list[Lease]:
        """A claim within the tenants' and kinds' concurrency limits (see storage.limits)."""
        deadline = self._timeout + _CLIENT_GRACE_SECONDS
        kind_list = None if kinds is None else list(kinds)
        with (
            self._translate(),
            self._pool.connection() as conn,
            self._watchdog.deadline(deadline, conn),
            conn.transaction(),
        ):
            conn.execute(Q["limits_lock"])
            tenant_limits = {
                row["name"]: int(row["max_running"])
                for row in conn.execute(Q["tenant_limits"]).fetchall()
            }
            plan = LimitPlan.of(
                tenant_limits, kind_limits, conn.execute(Q["running_counts"]).fetchall()
            )
            window = conn.execute(
                Q["limited_window"],
                {
                    "kinds": kind_list,
                    "full_tenants": plan.full_tenants,
                    "full_kinds": plan.full_kinds,
                    "window": limit * WINDOW_PER_SLOT,
                },
            ).fetchall()
            chosen = plan.choose(window, limit)
            if not chosen:
                return []
            rows = conn.execute(
                Q["exchange"],
                {
                    "job_ids": [],
                    "given": "{}",
                    "owner_id": owner_id,
                    "kinds": kind_list,
                    "lease_seconds": lease_seconds,
                    "limit": len(chosen),
                    "only_ids": chosen,
                },
            ).fetchall()
        return [
            lease_from_row(row, owner_id, lease_seconds, DECODE)
            for row in rows
            if row["outcome"] == "claimed"
        ]

    def tenant_limits(self) -> dict[str, int]:
        """Every tenant's concurrency limit."""
        return {row["name"]: int(row["max_running"]) for row in self._fetch("tenant_limits", {})}

    def set_tenant_limit(self, tenant: str, limit: int | None) -> None:
        """Set (or with None, remove) a tenant's concurrency limit."""
        if limit is None:
            self._fetch("clear_tenant_limit", {"name": tenant})
        else:
            self._fetch("set_tenant_limit", {"name": tenant, "n": limit})

    def purge_batch(self, after: int, scan: int, older_than: float, keep_keys: float) -> PurgeBatch:
        """One bounded purge step: one statement."""
        row = self._fetch(
            "purge_batch",
            {"after": after, "scan": scan, "older_than": older_than, "keep_keys": keep_keys},
        )[0]
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


class PostgresFenceTx:
    """Fence decision steps inside one transaction."""

    def __init__(self, conn: psycopg.Connection[DictRow]) -> None:
        self._conn = conn

    def highest(self, scope: str) -> int:
        """Lock the scope's row (creating it at 0) and return its highest accepted fence."""
        self._conn.execute(Q["fence_lock_scope"], {"scope": scope})
        row = self._conn.execute(Q["fence_highest"], {"scope": scope}).fetchone()
        assert row is not None
        return int(row["highest"])

    def get(self, key: str) -> FenceRecord | None:
        """The record of `key`, locked."""
        row = self._conn.execute(Q["fence_get"], {"key": key}).fetchone()
        return None if row is None else fence_record_from_row(row, DECODE)

    def begin(self, key: str, scope: str, fence: int) -> None:
        """Mark `key` running under `fence`."""
        self._conn.execute(Q["fence_begin"], {"key": key, "scope": scope, "fence": fence})

    def raise_highest(self, scope: str, fence: int) -> None:
        """highest := max(highest, fence)."""
        self._conn.execute(Q["fence_raise"], {"scope": scope, "fence": fence})


def _results_map(
    leases: Sequence[Lease], results_json: Sequence[str], details_json: Sequence[str]
) -> str:
    """{"<job id>": {"o": owner, "t": token, "r": result, "d": detail}} as JSON text; the
    result and detail texts are canonical JSON already and go in as they are."""
    entries = (
        f'"{lease.job_id}":{{"o":{json.dumps(lease.owner_id)},"t":{lease.token},'
        f'"r":{result},"d":{detail}}}'
        for lease, result, detail in zip(leases, results_json, details_json, strict=True)
    )
    return "{" + ",".join(entries) + "}"


def _sever_connection(conn: object) -> None:
    if isinstance(conn, psycopg.Connection) and not conn.closed:
        try:
            fileno = conn.pgconn.socket
        except psycopg.OperationalError:
            return
        sever_socket(fileno)
