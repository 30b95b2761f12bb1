"""Submitting jobs: one, keyed or not, or a batch of one kind in one statement, each with its
`SubmitOptions`."""

from __future__ import annotations

import builtins
import logging
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tenure import tracing
from tenure.budgets import check_units
from tenure.errors import IdempotencyConflict, InvalidArgument
from tenure.evidence import check_principal
from tenure.ids import new_job_id
from tenure.ledger.core import LedgerCore, Part, event_detail
from tenure.ledger.declarations import Declarations
from tenure.ledger.rollouts import Rollouts
from tenure.logs import emit
from tenure.options import SubmitOptions
from tenure.storage import NewJob
from tenure.storage.base import JobStore
from tenure.types import JSON
from tenure.validation import EncodedJson, check_int, check_name, encode_json

log = logging.getLogger("tenure")

# Jobs per submit_many call: one statement's parameters stay a few megabytes at most.
MAX_BATCH = 10_000


# A child's id is derived from its tenant and key: after an asynchronous failover lost its
# insert, the parent's next attempt spawns it again under the same id, so its effects keep
# their keys and fence scopes and a receiver that saw them does not run them twice (the model's
# `child_ids` configuration; `bug_child_ids` shows a fresh id repeating the effect).
_CHILD_IDS = uuid.UUID("6f1d3c2a-8b4e-5d7f-9a0b-1c2d3e4f5a6b")


def child_id(tenant: str, idempotency_key: str) -> str:
    """The id of the child job keyed `idempotency_key` in `tenant`: the same every time."""
    return str(uuid.uuid5(_CHILD_IDS, f"{tenant}\x00{idempotency_key}"))


@dataclass(frozen=True, slots=True)
class _Placement:
    """The validated fields a submit shares with every job of a `submit_many` batch."""

    kind: str
    tenant: str
    max_attempts: int
    priority: int
    run_at: datetime | None
    delay_seconds: float
    labels_json: str | None = None
    traceparent: str | None = None
    principal: str | None = None
    budget_json: str | None = None


def units_json(units: object) -> str:
    """A budget, checked (`tenure.budgets.check_units`), as canonical JSON."""
    return encode_json(check_units(units), "budget", 4096).text


class Submission(Part[JobStore]):
    """`submit`, `submit_or_find`, `submit_many`, and the wake-ups they cause."""

    def __init__(
        self, core: LedgerCore, store: JobStore, rollouts: Rollouts, declarations: Declarations
    ) -> None:
        super().__init__(core, store)
        self.rollouts = rollouts
        self.declarations = declarations

    def submit_or_find(
        self, kind: str, payload: JSON, options: SubmitOptions, parent_id: str | None = None
    ) -> tuple[str, bool]:
        """Persist a job (see `Ledger.submit`), also saying whether it is new (False: the
        key's existing job). `parent_id` makes the job a child of that job (`ctx.spawn`)."""
        placement = self._placement(kind, options)
        kind, tenant = placement.kind, placement.tenant
        idempotency_key = options.idempotency_key
        if idempotency_key is not None:
            idempotency_key = check_name(idempotency_key, "idempotency key")
        job, encoded = self._new_job(placement, payload, idempotency_key, parent_id)
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
        self, kind: str, payloads: Sequence[JSON], options: SubmitOptions
    ) -> builtins.list[str]:
        """Many jobs of one kind in one statement (see `Ledger.submit_many`)."""
        if options.idempotency_key is not None or options.budget is not None:
            raise InvalidArgument(
                "submit_many takes no idempotency key and no budget: a keyed or budgeted job "
                "goes through submit"
            )
        placement = self._placement(kind, options)
        if isinstance(payloads, str | bytes) or not isinstance(payloads, Sequence):
            raise InvalidArgument("payloads must be a list of JSON values")
        check_int(len(payloads), "number of payloads", 1, MAX_BATCH)
        jobs = []
        for index, payload in enumerate(payloads):
            try:
                jobs.append(self._new_job(placement, payload, None)[0])
            except InvalidArgument as exc:
                raise type(exc)(f"payload {index} of {len(payloads)}: {exc}") from exc
        self.store.submit_many(jobs)
        emit(log, logging.INFO, "jobs_submitted", kind=placement.kind, count=len(jobs))
        return [job.id for job in jobs]

    def _placement(self, kind: str, options: SubmitOptions) -> _Placement:
        """Validate what a submit shares with every job of a batch."""
        max_attempts = options.max_attempts
        attempts = self.core.default_max_attempts if max_attempts is None else max_attempts
        run_at, delay = _schedule(options.run_after)
        kind = check_name(kind, "kind")
        traceparent = options.traceparent
        if traceparent is None:
            traceparent = tracing.current_traceparent()
        else:
            traceparent = tracing.check_traceparent(traceparent)
        principal = options.principal
        return _Placement(
            kind=kind,
            tenant=check_name(options.tenant, "tenant"),
            max_attempts=check_int(attempts, "max_attempts", 1),
            priority=check_int(options.priority, "priority"),
            run_at=run_at,
            delay_seconds=delay,
            labels_json=self.declarations.submitted_labels(kind, options.labels),
            traceparent=traceparent,
            principal=None if principal is None else check_principal(principal),
            budget_json=None if options.budget is None else units_json(options.budget),
        )

    def _new_job(
        self,
        placement: _Placement,
        payload: JSON,
        idempotency_key: str | None,
        parent_id: str | None = None,
    ) -> tuple[NewJob, EncodedJson]:
        """A new job row (and its encoded payload) with its `job_submitted` detail."""
        encoded = encode_json(payload, "payload", self.core.max_payload_bytes)
        job_id = new_job_id(self.core.clock)
        if parent_id is not None and idempotency_key is not None:
            job_id = child_id(placement.tenant, idempotency_key)
        variant, held = self.rollouts.variant_for(placement.kind, placement.tenant, job_id)
        job = NewJob(
            id=job_id,
            kind=placement.kind,
            tenant=placement.tenant,
            max_attempts=placement.max_attempts,
            idempotency_key=idempotency_key,
            payload_json=encoded.text,
            payload_sha256=encoded.sha256,
            run_at=placement.run_at,
            delay_seconds=placement.delay_seconds,
            priority=placement.priority,
            # The job's row keeps its kind and priority: the event keeps what the row does not
            # say of the submit (about 40 bytes a job less, docs/explanation/storage.md).
            detail_json=event_detail(
                payload_sha256=encoded.sha256,
                payload_bytes=encoded.size,
                **({} if parent_id is None else {"parent_id": parent_id}),
                **({} if variant is None else {"variant": variant}),
                **({"held": True} if held else {}),
            ),
            parent_id=parent_id,
            variant=variant,
            held=held,
            labels_json=placement.labels_json,
            traceparent=placement.traceparent,
            principal=placement.principal,
            budget_json=placement.budget_json,
        )
        return job, encoded

    def on_claimable(
        self,
        callback: Callable[[str], None],
        on_cancelled: Callable[[str, int], None] | None = None,
    ) -> Callable[[], None]:
        """Call `callback(kind)` ('' for any kind) when jobs may have become claimable, and
        `on_cancelled(job_id, token)` when a job is cancelled: PostgreSQL LISTEN/NOTIFY, or
        this process's own submits and cancels on SQLite. Best effort (a worker polls and
        renews as well); returns the function that stops it."""
        return self.store.listen(callback, on_cancelled)


# The furthest delay a submit may ask for: far beyond any job's wait, well inside both
# databases' timestamp ranges.
MAX_DELAY_SECONDS = 100 * 365 * 86400.0


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
    if isinstance(run_after, bool) or not isinstance(run_after, int | float):
        raise InvalidArgument("run_after must be a datetime, a timedelta or seconds >= 0")
    try:
        seconds = float(run_after)
    except OverflowError:  # an int past a float's range
        seconds = math.inf
    if not (0 <= seconds <= MAX_DELAY_SECONDS):  # NaN too
        raise InvalidArgument(
            f"run_after must be between 0 and {MAX_DELAY_SECONDS:.0f} seconds (100 years), "
            f"got {run_after!r}"
        )
    return None, seconds
