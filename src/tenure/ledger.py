"""The public Ledger: validated, logged operations over a Store."""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

from tenure import keys
from tenure.errors import (
    IdempotencyConflict,
    InvalidArgument,
    InvalidTransition,
    JobNotFound,
    LeaseLost,
    OwnershipUnknown,
    StoreUnavailable,
    TenantExists,
    TenantNotFound,
    TenureError,
    TerminalJob,
)
from tenure.logs import emit
from tenure.storage import NewJob, Store, open_store
from tenure.storage.base import EventTotals, QueueFigure, TenantRecord
from tenure.types import (
    JSON,
    Event,
    ExtendResult,
    Job,
    JobState,
    Lease,
    PurgeReport,
    Stage,
    StageKind,
)
from tenure.validation import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    EncodedJson,
    check_int,
    check_job_id,
    check_name,
    check_seconds,
    encode_json,
)

log = logging.getLogger("tenure")
T = TypeVar("T")

DEFAULT_MAX_ATTEMPTS = 5
MAX_LIST_LIMIT = 1000
# Jobs per submit_many call: one statement's parameters stay a few megabytes at most.
MAX_BATCH = 10_000
# A purged job with an idempotency key is kept at least this long (seconds): a repeated
# submit within the window still finds it.
DEFAULT_KEY_RETENTION = 7 * 86400.0
# How often a ledger looks whether tenant limits exist (seconds).
LIMITS_REFRESH = 2.0


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Exponential backoff with equal jitter: between half and all of min(cap, base·2^(n-1))."""
    ceiling = min(cap, base * 2 ** max(0, attempt - 1))
    return float(ceiling * random.uniform(0.5, 1.0))


def _seconds_of(value: timedelta | float, what: str) -> float:
    """A non-negative age in seconds, from seconds or a timedelta."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"{what} must be seconds or a timedelta, got {value!r}")
    if not 0 <= seconds < float("inf"):
        raise InvalidArgument(f"{what} must be zero or more seconds, got {value!r}")
    return float(seconds)


@dataclass(frozen=True, slots=True)
class _Placement:
    """The validated fields a submit shares with every job of a `submit_many` batch."""

    kind: str
    tenant: str
    max_attempts: int
    priority: int
    run_at: datetime | None
    delay_seconds: float


def _detail(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"), sort_keys=True, default=str)


class Ledger:
    """Durable, leased, fenced jobs. Create one with `tenure.connect(url)`.

    Every write that acts for a lease is conditional on the lease still being held by the
    database's clock; zero rows raise `LeaseLost` and are recorded as `result_rejected` (or
    `heartbeat_lost`). A database that cannot be reached during a lease operation raises
    `OwnershipUnknown`.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_base: float = 1.0,
        backoff_cap: float = 300.0,
    ) -> None:
        self.store = store
        self.max_payload_bytes = check_int(max_payload_bytes, "max_payload_bytes", 1)
        self.default_max_attempts = check_int(default_max_attempts, "default_max_attempts", 1)
        self.backoff_base = check_seconds(backoff_base, "backoff_base")
        self.backoff_cap = check_seconds(backoff_cap, "backoff_cap")
        self._unconfirmed: list[tuple[str, str, int, str]] = []
        self._unconfirmed_lock = threading.Lock()
        self._limits_seen_at: float | None = None
        self._has_limits = False

    # -- lifecycle ---------------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply missing schema migrations (under a lock); return the versions applied now."""
        return self.store.migrate()

    def close(self) -> None:
        """Write any held-back events if the database answers, then release the connections."""
        with contextlib.suppress(TenureError):
            self._confirm_unconfirmed(attempts=1)
        self.store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now(self) -> datetime:
        """The database's clock, the one arbiter of leases."""
        return self.store.now()

    # -- submitting --------------------------------------------------------------------------

    def submit(
        self,
        kind: str,
        payload: JSON,
        *,
        idempotency_key: str | None = None,
        tenant: str = "default",
        max_attempts: int | None = None,
        priority: int = 0,
        run_after: datetime | timedelta | float | None = None,
    ) -> str:
        """Persist a job and return its id at once.

        A key the tenant already used returns that job's id when kind and payload are the same
        JSON value (key order does not matter), and raises `IdempotencyConflict` otherwise.
        `run_after` is a time, or a delay (timedelta or seconds) from the database's now.
        """
        job_id, _ = self.submit_or_find(
            kind,
            payload,
            idempotency_key=idempotency_key,
            tenant=tenant,
            max_attempts=max_attempts,
            priority=priority,
            run_after=run_after,
        )
        return job_id

    def submit_or_find(
        self,
        kind: str,
        payload: JSON,
        *,
        idempotency_key: str | None = None,
        tenant: str = "default",
        max_attempts: int | None = None,
        priority: int = 0,
        run_after: datetime | timedelta | float | None = None,
    ) -> tuple[str, bool]:
        """`submit`, also saying whether the job is new (False: the key's existing job)."""
        placement = self._placement(kind, tenant, max_attempts, priority, run_after)
        kind, tenant = placement.kind, placement.tenant
        if idempotency_key is not None:
            idempotency_key = check_name(idempotency_key, "idempotency key")
        job, encoded = self._new_job(placement, payload, idempotency_key)
        if self.store.submit(job):
            emit(
                log,
                logging.INFO,
                "job_submitted",
                job=job.id,
                kind=kind,
                payload_sha256=encoded.sha256,
                payload_bytes=encoded.size,
            )
            return job.id, True
        assert idempotency_key is not None  # only a key can make an insert a no-op
        existing = self.store.find_by_key(tenant, idempotency_key)
        if existing is None:  # pragma: no cover - the key's job was purged between statements
            raise IdempotencyConflict(f"the idempotency key {idempotency_key!r} is in flux")
        if existing.kind != kind or existing.payload_sha256 != encoded.sha256:
            raise IdempotencyConflict(
                f"the idempotency key {idempotency_key!r} of tenant {tenant!r} already belongs "
                f"to job {existing.id} with a different kind or payload: use a new key for "
                "new work"
            )
        return existing.id, False

    def submit_many(
        self,
        kind: str,
        payloads: Sequence[JSON],
        *,
        tenant: str = "default",
        max_attempts: int | None = None,
        priority: int = 0,
        run_after: datetime | timedelta | float | None = None,
    ) -> builtins.list[str]:
        """Submit many jobs of one kind in one statement (one transaction on SQLite).

        All or nothing: a payload that is not JSON or too large rejects the whole batch before
        anything is written. No idempotency keys here: a keyed job goes through `submit`.
        Returns the new ids in the order of `payloads`.
        """
        placement = self._placement(kind, tenant, max_attempts, priority, run_after)
        if isinstance(payloads, str | bytes) or not isinstance(payloads, Sequence):
            raise InvalidArgument("payloads must be a list of JSON values")
        check_int(len(payloads), "number of payloads", 1, MAX_BATCH)
        jobs = [self._new_job(placement, payload, None)[0] for payload in payloads]
        self.store.submit_many(jobs)
        emit(log, logging.INFO, "jobs_submitted", kind=placement.kind, count=len(jobs))
        return [job.id for job in jobs]

    def _placement(
        self,
        kind: str,
        tenant: str,
        max_attempts: int | None,
        priority: int,
        run_after: datetime | timedelta | float | None,
    ) -> _Placement:
        """Validate what a submit shares with every job of a batch."""
        attempts = self.default_max_attempts if max_attempts is None else max_attempts
        run_at, delay = _schedule(run_after)
        return _Placement(
            kind=check_name(kind, "kind"),
            tenant=check_name(tenant, "tenant"),
            max_attempts=check_int(attempts, "max_attempts", 1),
            priority=check_int(priority, "priority"),
            run_at=run_at,
            delay_seconds=delay,
        )

    def _new_job(
        self, placement: _Placement, payload: JSON, idempotency_key: str | None
    ) -> tuple[NewJob, EncodedJson]:
        """A new job row (and its encoded payload) with its `job_submitted` detail."""
        encoded = encode_json(payload, "payload", self.max_payload_bytes)
        job = NewJob(
            id=str(uuid.uuid4()),
            kind=placement.kind,
            tenant=placement.tenant,
            max_attempts=placement.max_attempts,
            idempotency_key=idempotency_key,
            payload_json=encoded.text,
            payload_sha256=encoded.sha256,
            run_at=placement.run_at,
            delay_seconds=placement.delay_seconds,
            priority=placement.priority,
            detail_json=_detail(
                kind=placement.kind,
                payload_sha256=encoded.sha256,
                payload_bytes=encoded.size,
                priority=placement.priority,
            ),
        )
        return job, encoded

    def purge(
        self,
        older_than: timedelta | float,
        *,
        keep_keys: timedelta | float = DEFAULT_KEY_RETENTION,
        batch_size: int = 1000,
        on_batch: Callable[[PurgeReport], None] | None = None,
    ) -> PurgeReport:
        """Delete terminal jobs last changed more than `older_than` ago (by the database's
        clock), with their events, stages and effects.

        Bounded batches (`batch_size` jobs looked at per transaction, in submission order), so
        it is safe while workers run: only jobs that are terminal when their batch runs go. A
        job with an idempotency key is kept until it is also older than `keep_keys`, so a
        repeated submit within that window still finds it. `on_batch` gets the running totals.
        """
        age = _seconds_of(older_than, "older_than")
        key_age = _seconds_of(keep_keys, "keep_keys")
        scan = check_int(batch_size, "batch size", 1, MAX_BATCH)
        report = PurgeReport()
        after = 0
        while True:
            batch = self.store.purge_batch(after, scan, age, key_age)
            report.batches += 1
            report.jobs += batch.jobs
            report.stages += batch.stages
            report.effects += batch.effects
            report.events += batch.events
            report.kept_for_keys += batch.kept_for_keys
            if on_batch is not None:
                on_batch(report)
            if batch.scanned < scan or batch.reached_new:
                break
            after = batch.last_seq
        emit(
            log,
            logging.INFO,
            "purged",
            jobs=report.jobs,
            events=report.events,
            stages=report.stages,
            effects=report.effects,
            kept_for_keys=report.kept_for_keys,
        )
        return report

    def on_claimable(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call `callback(kind)` ('' for any kind) when jobs may have become claimable:
        PostgreSQL LISTEN/NOTIFY, or this process's own submits on SQLite. Best effort (a
        worker polls as well); returns the function that stops it."""
        return self.store.listen(callback)

    # -- leases ------------------------------------------------------------------------------

    def claim(
        self,
        owner_id: str,
        *,
        kinds: Sequence[str] | None = None,
        lease_seconds: float = 90.0,
    ) -> Lease | None:
        """Atomically take the best claimable job (priority, then age), or None.

        Claimable: queued and due, or running with an expired lease (by the database's clock).
        The claim increments the job's fencing token and attempt. It also settles expired
        leases of the kinds asked for: a job with no attempts left becomes `failed`
        (`lease_expired`).
        """
        leases = self.claim_many(owner_id, limit=1, kinds=kinds, lease_seconds=lease_seconds)
        return leases[0] if leases else None

    def claim_many(
        self,
        owner_id: str,
        *,
        limit: int,
        kinds: Sequence[str] | None = None,
        lease_seconds: float = 90.0,
        kind_limits: Mapping[str, int] | None = None,
    ) -> list[Lease]:
        """Like `claim`, for up to `limit` jobs in one statement (one transaction on SQLite).

        With `kind_limits` ({kind: n}), or once any tenant has a limit (`set_tenant_limit`),
        the claim keeps every kind and tenant within its limit, across workers: a serialised
        transaction of a few statements instead of one.
        """
        owner_id = check_name(owner_id, "owner id")
        seconds = check_seconds(lease_seconds, "lease_seconds")
        limit = check_int(limit, "limit", 1)
        kind_list = _kinds(kinds)
        limits = {
            check_name(kind, "kind"): check_int(n, f"concurrency limit of {kind!r}", 1)
            for kind, n in (kind_limits or {}).items()
            if kind_list is None or kind in kind_list
        }
        if limits or self.has_tenant_limits():
            leases = self.store.limited_claim(owner_id, kind_list, seconds, limit, limits)
        else:
            leases = self.store.claim(owner_id, kind_list, seconds, limit)
        self._log_claims(leases, owner_id)
        return leases

    # -- fair scheduling ---------------------------------------------------------------------

    def set_tenant_limit(self, tenant: str, limit: int | None) -> None:
        """At most `limit` jobs of `tenant` run at once, across all workers (None: no limit).

        Claims respect it from the next claim in this process; other processes notice within
        a few seconds (they look for tenant limits every `LIMITS_REFRESH` seconds).
        """
        tenant = check_name(tenant, "tenant")
        if limit is not None:
            limit = check_int(limit, "tenant limit", 1)
        self.store.set_tenant_limit(tenant, limit)
        self._limits_seen_at = None

    def tenant_limits(self) -> dict[str, int]:
        """Every tenant's concurrency limit."""
        return self.store.tenant_limits()

    def has_tenant_limits(self) -> bool:
        """Whether any tenant has a limit (looked up at most every `LIMITS_REFRESH` s).

        Never raises: while the database cannot be reached the last answer stands (the
        claims themselves fail meanwhile), and it is looked up again on the next call.
        """
        now = time.monotonic()
        if self._limits_seen_at is None or now - self._limits_seen_at > LIMITS_REFRESH:
            try:
                self._has_limits = bool(self.store.tenant_limits())
            except StoreUnavailable:
                return self._has_limits
            self._limits_seen_at = now
        return self._has_limits

    @staticmethod
    def _log_claims(leases: Sequence[Lease], owner_id: str) -> None:
        for lease in leases:
            emit(
                log,
                logging.INFO,
                "job_claimed",
                job=lease.job_id,
                token=lease.token,
                attempt=lease.attempt,
                owner=owner_id,
                lease_until=lease.lease_until,
            )

    def extend(self, lease: Lease, lease_seconds: float | None = None) -> datetime:
        """Renew the lease from the database's now; return the new lease end.

        Raises `LeaseLost` when the lease no longer holds, `OwnershipUnknown` when the database
        does not answer.
        """
        result = self.extend_many([lease], lease_seconds)
        if lease.job_id in result.renewed:
            return result.renewed[lease.job_id]
        raise LeaseLost(
            f"job {lease.job_id}: token {lease.token} no longer holds the lease; stop and "
            "publish nothing"
        )

    def extend_many(
        self, leases: Sequence[Lease], lease_seconds: float | None = None
    ) -> ExtendResult:
        """Renew many leases in one statement. Lost ones are reported, not raised."""
        seconds = [
            check_seconds(
                lease_seconds if lease_seconds is not None else lease.lease_seconds, "lease_seconds"
            )
            for lease in leases
        ]
        try:
            renewed = self.store.extend_many(leases, seconds)
        except StoreUnavailable as exc:
            for lease in leases:
                self._ownership_unknown(lease, "extend", exc)
            raise OwnershipUnknown(
                f"could not renew {len(leases)} lease(s): {exc}; start no new irreversible step"
            ) from exc
        self._confirm_unconfirmed()
        lost = [lease.job_id for lease in leases if lease.job_id not in renewed]
        for lease in leases:
            if lease.job_id in lost:
                self._reject(lease, "heartbeat_lost", "extend")
            else:
                emit(
                    log,
                    logging.INFO,
                    "heartbeat_ok",
                    job=lease.job_id,
                    token=lease.token,
                    lease_until=renewed[lease.job_id],
                )
        return ExtendResult(renewed=renewed, lost=lost)

    def save_step(self, lease: Lease, step: int, checkpoint: JSON = None) -> None:
        """Advance the job's cursor to `step` and keep `checkpoint`, while the lease holds."""
        step = check_int(step, "step", 0)
        encoded = encode_json(checkpoint, "checkpoint", self.max_payload_bytes)
        detail = _detail(step=step, checkpoint_bytes=encoded.size, checkpoint_sha256=encoded.sha256)
        done = self._guard(
            lease, "save_step", lambda: self.store.save_step(lease, step, encoded.text, detail)
        )
        if not done:
            self._lost(lease, "save_step")

    def complete(self, lease: Lease, result: JSON = None) -> None:
        """Publish the result and end the job `succeeded`, while the lease holds.

        A stale lease raises `LeaseLost`; the rejected result is recorded as an event (its size
        and hash only) and never becomes the job's result.
        """
        encoded = encode_json(result, "result", self.max_payload_bytes)
        detail = _detail(result_bytes=encoded.size, result_sha256=encoded.sha256)
        if not self._guard(
            lease, "complete", lambda: self.store.complete(lease, encoded.text, detail)
        ):
            self._lost(lease, "complete", result_sha256=encoded.sha256)

    def complete_many(
        self, outcomes: Sequence[tuple[Lease, JSON]]
    ) -> dict[str, TenureError | None]:
        """`complete` for many leases in one statement (one transaction on SQLite).

        Returns, per job id, None when published, or the error `complete` would have raised
        for that job alone (`LeaseLost`, `PayloadTooLarge`, …). Raises `OwnershipUnknown` for
        all of them when the database cannot be reached.
        """
        return self._publish(
            outcomes,
            lambda leases, texts, details: (self.store.complete_many(leases, texts, details), []),
        )[0]

    def complete_and_claim(
        self,
        outcomes: Sequence[tuple[Lease, JSON]],
        owner_id: str,
        *,
        limit: int,
        kinds: Sequence[str] | None = None,
        lease_seconds: float = 90.0,
    ) -> tuple[dict[str, TenureError | None], builtins.list[Lease]]:
        """`complete_many` and `claim_many` in one statement: a busy worker publishes what it
        finished and takes its next jobs in one round trip. Returns the answers per job (as
        `complete_many`) and the new leases."""
        owner_id = check_name(owner_id, "owner id")
        seconds = check_seconds(lease_seconds, "lease_seconds")
        limit = check_int(limit, "limit", 1)
        kind_list = _kinds(kinds)
        answers, leases = self._publish(
            outcomes,
            lambda done, texts, details: self.store.exchange(
                done, texts, details, owner_id, kind_list, seconds, limit
            ),
        )
        self._log_claims(leases, owner_id)
        return answers, leases

    def _publish(
        self,
        outcomes: Sequence[tuple[Lease, JSON]],
        write: Callable[
            [builtins.list[Lease], builtins.list[str], builtins.list[str]],
            tuple[set[str], builtins.list[Lease]],
        ],
    ) -> tuple[dict[str, TenureError | None], builtins.list[Lease]]:
        """Encode each result (refusing bad ones alone), write, and answer per job."""
        answers: dict[str, TenureError | None] = {}
        leases: builtins.list[Lease] = []
        texts: builtins.list[str] = []
        details: builtins.list[str] = []
        digests: dict[str, str] = {}
        for lease, result in outcomes:
            try:
                encoded = encode_json(result, "result", self.max_payload_bytes)
            except TenureError as exc:
                answers[lease.job_id] = exc
                continue
            leases.append(lease)
            texts.append(encoded.text)
            details.append(_detail(result_bytes=encoded.size, result_sha256=encoded.sha256))
            digests[lease.job_id] = encoded.sha256
        try:
            done, claimed = write(leases, texts, details)
        except StoreUnavailable as exc:
            for lease in leases:
                self._ownership_unknown(lease, "complete", exc)
            raise OwnershipUnknown(
                f"could not complete {len(leases)} job(s): {exc}; whether their leases still "
                "hold is unknown"
            ) from exc
        self._confirm_unconfirmed()
        for lease in leases:
            if lease.job_id in done:
                answers[lease.job_id] = None
                continue
            try:
                self._lost(lease, "complete", result_sha256=digests[lease.job_id])
            except TenureError as exc:
                answers[lease.job_id] = exc
        return answers, claimed

    def fail(
        self,
        lease: Lease,
        error: JSON,
        *,
        retryable: bool = True,
        retry_in: float | None = None,
    ) -> JobState:
        """Fail this attempt. Retryable with attempts left: queued again after an exponential,
        jittered backoff (or `retry_in` seconds). Otherwise the job ends `failed`.

        Returns the job's new state.
        """
        if isinstance(error, str):
            error = {"code": "error", "message": error}
        encoded = encode_json(error, "error", self.max_payload_bytes)
        delay: float | None = None
        if retryable:
            delay = (
                check_seconds(retry_in, "retry_in")
                if retry_in is not None
                else backoff_delay(lease.attempt, self.backoff_base, self.backoff_cap)
            )
        code = error.get("code") if isinstance(error, dict) else None
        detail = _detail(
            code=code if isinstance(code, str) else None,
            retryable=retryable,
            error_sha256=encoded.sha256,
        )
        state = self._guard(
            lease, "fail", lambda: self.store.fail(lease, encoded.text, delay, detail)
        )
        if state is None:
            self._lost(lease, "fail")
        return state

    def release(self, lease: Lease) -> None:
        """Give the job back at once, without spending the attempt (graceful shutdown)."""
        if not self._guard(lease, "release", lambda: self.store.release(lease)):
            self._lost(lease, "release")

    def start_stage(
        self,
        lease: Lease,
        position: int,
        name: str,
        kind: StageKind,
        *,
        effect_key: str | None = None,
        **detail: Any,
    ) -> None:
        """Write-ahead record of a step or effect about to run, while the lease holds."""
        check_int(position, "stage position", 0)
        check_name(name, "stage name")
        detail_json = _detail(position=position, name=name, **detail)
        done = self._guard(
            lease,
            "start_stage",
            lambda: self.store.stage_start(lease, position, name, kind, effect_key, detail_json),
        )
        if not done:
            self._lost(lease, "start_stage")

    def finish_stage(
        self, lease: Lease, position: int, result: JSON, *, checkpoint: JSON = None
    ) -> str:
        """Record a stage's result and advance the cursor past it, while the lease holds;
        with `checkpoint`, store it as the job's checkpoint in the same write.

        Returns the result's canonical JSON text (what a replay will return).
        """
        encoded = encode_json(result, "stage result", self.max_payload_bytes)
        saved = (
            None
            if checkpoint is None
            else encode_json(checkpoint, "checkpoint", self.max_payload_bytes).text
        )
        detail_json = _detail(
            position=position, result_bytes=encoded.size, result_sha256=encoded.sha256
        )
        done = self._guard(
            lease,
            "finish_stage",
            lambda: self.store.stage_done(lease, position, encoded.text, detail_json, saved),
        )
        if not done:
            self._lost(lease, "finish_stage")
        return encoded.text

    def record(self, lease: Lease, event: str, **detail: Any) -> None:
        """Append an event about this lease's job (e.g. `step_in_doubt`); no lease check."""
        self.store.record_event(lease.job_id, event, lease.token, lease.owner_id, _detail(**detail))

    # -- operator actions --------------------------------------------------------------------

    def cancel(self, job_id: str) -> None:
        """Cancel a queued or running job; its token is bumped so no running worker can publish.

        Raises `TerminalJob` for a job already succeeded, failed or cancelled.
        """
        job_id = check_job_id(job_id)
        if self.store.cancel(job_id):
            emit(log, logging.INFO, "job_cancelled", job=job_id)
            return
        job = self.get(job_id)
        raise TerminalJob(f"job {job_id} is already {job.state.value}; nothing to cancel")

    def requeue(self, job_id: str) -> None:
        """Make a failed or cancelled job claimable again from its saved step (attempt reset)."""
        job_id = check_job_id(job_id)
        if self.store.requeue(job_id):
            emit(log, logging.INFO, "job_requeued", job=job_id)
            return
        job = self.get(job_id)
        raise InvalidTransition(
            f"job {job_id} is {job.state.value}: only failed or cancelled jobs can be requeued"
        )

    # -- reading -----------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        """The job as stored now; `JobNotFound` for an unknown or malformed id."""
        job_id = check_job_id(job_id)
        job = self.store.get(job_id)
        if job is None:
            raise JobNotFound(f"no job has the id {job_id}")
        return job

    def events(self, job_id: str) -> list[Event]:
        """The job's flight recorder, oldest first."""
        job_id = check_job_id(job_id)
        events = self.store.events(job_id)
        if not events and self.store.get(job_id) is None:
            raise JobNotFound(f"no job has the id {job_id}")
        return events

    def stages(self, job_id: str) -> list[Stage]:
        """The job's recorded steps and effects, in handler order."""
        job_id = check_job_id(job_id)
        stages = self.store.stages(job_id)
        if not stages and self.store.get(job_id) is None:
            raise JobNotFound(f"no job has the id {job_id}")
        return stages

    def list(
        self,
        state: JobState | str | None = None,
        kind: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[Job]:
        """Jobs newest first; pass the last id of a page as `after` for the next page."""
        if state is not None:
            try:
                state = JobState(state)
            except ValueError:
                choices = ", ".join(s.value for s in JobState)
                raise InvalidArgument(f"unknown state {state!r}: use one of {choices}") from None
        limit = check_int(limit, "limit", 1)
        if limit > MAX_LIST_LIMIT:
            raise InvalidArgument(f"limit must be at most {MAX_LIST_LIMIT}, got {limit}")
        if after is not None:
            after = self.get(after).id
        return self.store.list_jobs(state, kind, tenant, limit, after)

    def counts(self, kind: str | None = None, tenant: str | None = None) -> dict[JobState, int]:
        """How many jobs are in each state (every state present, zeros included)."""
        found = self.store.count_by_state(kind, tenant)
        return {state: found.get(state, 0) for state in JobState}

    def wait(self, job_id: str, timeout: float = 30.0) -> Job:
        """The job once terminal, or as it is when `timeout` seconds have passed."""
        deadline = time.monotonic() + max(0.0, float(timeout))
        pause = 0.005
        while True:
            job = self.get(job_id)
            remaining = deadline - time.monotonic()
            if job.terminal or remaining <= 0:
                return job
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.25)

    # -- operations figures ------------------------------------------------------------------

    def queue_figures(self, by_tenant: bool = False) -> builtins.list[QueueFigure]:
        """Jobs per kind (and tenant) and state, with lease and queue ages, by the DB clock."""
        return self.store.queue_figures(by_tenant)

    def event_totals(self, by_tenant: bool = False) -> builtins.list[EventTotals]:
        """Recovery events per kind (and tenant): expiries, reclaims, rejections, …"""
        return self.store.event_totals(by_tenant)

    # -- tenants and API keys ----------------------------------------------------------------

    def create_tenant(self, name: str) -> str:
        """Create a tenant and return its first API key (shown once; stored as a digest)."""
        name = check_name(name, "tenant")
        issued = keys.new_key()
        if not self.store.create_tenant(name, issued.key_id, issued.key_sha256):
            raise TenantExists(f"tenant {name!r} exists; issue another key with issue_key")
        emit(log, logging.INFO, "tenant_created", tenant=name, key_id=issued.key_id)
        return issued.key

    def issue_key(self, tenant: str) -> str:
        """Another API key for an existing tenant (for rotation: issue, deploy, revoke the old)."""
        tenant = check_name(tenant, "tenant")
        issued = keys.new_key()
        if not self.store.add_api_key(tenant, issued.key_id, issued.key_sha256):
            raise TenantNotFound(f"no tenant is named {tenant!r}")
        emit(log, logging.INFO, "api_key_issued", tenant=tenant, key_id=issued.key_id)
        return issued.key

    def revoke_keys(self, tenant: str, key_id: str | None = None) -> int:
        """Revoke the tenant's live keys, or only `key_id`; return how many were revoked."""
        tenant = check_name(tenant, "tenant")
        if key_id is not None:
            key_id = check_name(key_id, "key id")
        revoked = self.store.revoke_api_keys(tenant, key_id)
        if not revoked and all(t.name != tenant for t in self.store.tenants()):
            raise TenantNotFound(f"no tenant is named {tenant!r}")
        emit(log, logging.INFO, "api_keys_revoked", tenant=tenant, count=revoked)
        return revoked

    def tenants(self) -> builtins.list[TenantRecord]:
        """Every tenant with its live and revoked key counts."""
        return self.store.tenants()

    def authenticate(self, key: str) -> str | None:
        """The tenant of a live key, or None (unknown, malformed or revoked)."""
        key_id = keys.key_id_of(key)
        if key_id is None:
            return None
        record = self.store.api_key(key_id)
        if record is None or not keys.matches(key, record.key_sha256) or record.revoked:
            return None
        return record.tenant

    # -- internals ---------------------------------------------------------------------------

    def _guard(self, lease: Lease, operation: str, write: Callable[[], T]) -> T:
        """Run a lease-guarded write; an unreachable database means ownership is unknown."""
        try:
            result = write()
        except StoreUnavailable as exc:
            self._ownership_unknown(lease, operation, exc)
            raise OwnershipUnknown(
                f"job {lease.job_id}: {operation} could not reach the database ({exc}); "
                "whether the lease still holds is unknown"
            ) from exc
        self._confirm_unconfirmed()
        return result

    def _lost(self, lease: Lease, operation: str, **detail: Any) -> NoReturn:
        """Record the rejected write, then raise `LeaseLost` (or `JobNotFound`)."""
        self._reject(lease, "result_rejected", operation, **detail)
        raise LeaseLost(
            f"job {lease.job_id}: token {lease.token} no longer holds the lease; the "
            f"{operation} was rejected and nothing was published"
        )

    def _reject(self, lease: Lease, event: str, operation: str, **detail: Any) -> None:
        exists = self.store.record_event(
            lease.job_id,
            event,
            lease.token,
            lease.owner_id,
            _detail(operation=operation, reason="zero_rows", **detail),
        )
        if not exists:
            raise JobNotFound(f"no job has the id {lease.job_id}")
        emit(
            log,
            logging.WARNING,
            event,
            job=lease.job_id,
            token=lease.token,
            owner=lease.owner_id,
            operation=operation,
            reason="zero_rows",
        )

    def report_unconfirmed(self, lease: Lease, last_confirmed: datetime) -> None:
        """A worker's conservative deadline passed without the database confirming the lease:
        log `ownership_unknown` now, write it to the events when the database answers."""
        self._ownership_unknown(lease, "lease_unconfirmed", None, last_confirmed=last_confirmed)

    def _ownership_unknown(
        self,
        lease: Lease,
        operation: str,
        exc: Exception | None,
        last_confirmed: datetime | None = None,
    ) -> None:
        request_id = uuid.uuid4().hex[:12]
        last = (last_confirmed or lease.lease_until).isoformat()
        error = "none" if exc is None else type(exc).__name__
        emit(
            log,
            logging.WARNING,
            "ownership_unknown",
            job=lease.job_id,
            token=lease.token,
            owner=lease.owner_id,
            last_confirmed_lease_until=last,
            request=request_id,
            operation=operation,
            error=error,
        )
        detail = _detail(
            operation=operation,
            last_confirmed_lease_until=last,
            request_id=request_id,
            error=error,
        )
        with self._unconfirmed_lock:
            self._unconfirmed.append((lease.job_id, lease.owner_id, lease.token, detail))

    def _confirm_unconfirmed(self, attempts: int = 3) -> None:
        """Write the `ownership_unknown` events held back while the database was away.

        Called right after the database answered, so a failure here is most likely a pooled
        connection the outage broke: try again a few times before keeping them for later.
        """
        if not self._unconfirmed:
            return
        with self._unconfirmed_lock:
            pending, self._unconfirmed = self._unconfirmed, []
        index = 0
        while index < len(pending):
            job_id, owner_id, token, detail = pending[index]
            try:
                self.store.record_event(job_id, "ownership_unknown", token, owner_id, detail)
                index += 1
            except StoreUnavailable:
                attempts -= 1
                if attempts <= 0:
                    with self._unconfirmed_lock:
                        self._unconfirmed[:0] = pending[index:]
                    return


def _kinds(kinds: Sequence[str] | None) -> list[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        raise InvalidArgument("kinds must be a list of kind names, not one string")
    return [check_name(kind, "kind") for kind in kinds]


def _schedule(run_after: datetime | timedelta | float | None) -> tuple[datetime | None, float]:
    """Split `run_after` into an absolute time or a delay from the database's now."""
    if run_after is None:
        return None, 0.0
    if isinstance(run_after, datetime):
        if run_after.tzinfo is None:
            raise InvalidArgument("run_after must be timezone-aware (e.g. datetime.now(UTC))")
        return run_after, 0.0
    if isinstance(run_after, timedelta):
        run_after = run_after.total_seconds()
    if isinstance(run_after, bool) or not isinstance(run_after, int | float) or run_after < 0:
        raise InvalidArgument("run_after must be a datetime, a timedelta or seconds >= 0")
    return None, float(run_after)


def connect(
    url: str,
    *,
    migrate: bool = True,
    timeout: float = 5.0,
    pool_size: int = 4,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff_base: float = 1.0,
    backoff_cap: float = 300.0,
) -> Ledger:
    """Open the ledger at `url` (`sqlite:///file.db` or `postgresql://…`) and migrate it.

    `timeout` bounds connecting and each statement (seconds); a lease operation that exceeds
    it raises `OwnershipUnknown`.
    """
    ledger = Ledger(
        open_store(url, timeout=check_seconds(timeout, "timeout"), pool_size=pool_size),
        max_payload_bytes=max_payload_bytes,
        default_max_attempts=default_max_attempts,
        backoff_base=backoff_base,
        backoff_cap=backoff_cap,
    )
    if migrate:
        try:
            ledger.migrate()
        except BaseException:
            ledger.close()
            raise
    return ledger
