"""`Ledger`, the application's face: submit, read, wait, cancel, signal and requeue jobs, and
drive leases by hand. Operators' calls are `ledger.operations`; the worker runtime's are
`tenure.port.LeasePort` (`lease_port(ledger)`). Names that moved there still answer on the
ledger, with a `DeprecationWarning`, until 0.3."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self, Unpack

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import renamed
from tenure.evidence import Evidence
from tenure.ledger.core import LedgerCore
from tenure.ledger.declarations import Declarations
from tenure.ledger.evidence import EvidenceRecords
from tenure.ledger.leases import Leases
from tenure.ledger.limits import Limits
from tenure.ledger.operations import Operations
from tenure.ledger.port import LedgerPort
from tenure.ledger.reading import Reading
from tenure.ledger.retention import Retention
from tenure.ledger.rollouts import Rollouts
from tenure.ledger.schedules import Schedules
from tenure.ledger.submission import Submission
from tenure.ledger.tenants import Tenants
from tenure.ledger.waits import Waits
from tenure.options import SubmitKwargs, SubmitOptions, submit_options
from tenure.port import LeasePort
from tenure.storage import Store
from tenure.types import JSON, Event, Job, JobState, Lease, Stage

# Names the Ledger answered before it had faces: where each went. Reached through the ledger,
# they warn (removed in 0.3; see the changelog).
_TO_OPERATIONS = frozenset(
    {
        "authenticate",
        "check_rollout",
        "counts",
        "create_tenant",
        "declare_labels",
        "declare_versions",
        "declared_labels",
        "event_totals",
        "identify",
        "issue_key",
        "overdue_stages",
        "purge",
        "queue_figures",
        "release_held",
        "report_cost",
        "retrieval_totals",
        "revoke_keys",
        "rollout",
        "rollout_status",
        "rollout_statuses",
        "rollouts",
        "set_tenant_limit",
        "start_rollout",
        "stop_rollout",
        "tenant_limits",
        "tenants",
    }
)
_TO_PORT = frozenset(
    {
        "cache_refs",
        "cached_refs",
        "claim_many",
        "complete_and_claim",
        "complete_many",
        "extend_many",
        "finish_stage",
        "has_tenant_limits",
        "lost_reason",
        "on_claimable",
        "record",
        "record_evidence",
        "record_retrieval",
        "report_unconfirmed",
        "spawn",
        "stage_raised",
        "start_stage",
        "wait_on",
    }
)


class Ledger:
    """Durable, leased, fenced jobs. Create one with `tenure.connect(url)`.

    Every write that acts for a lease is conditional on the lease still being held by the
    database's clock; zero rows raise `LeaseLost` and are recorded as `result_rejected` (or
    `heartbeat_lost`). A database that cannot be reached during a lease operation raises
    `OwnershipUnknown`. Tenants, keys, limits, rollouts, purge and figures are
    `ledger.operations`.
    """

    def __init__(self, store: Store, *, clock: Clock = SYSTEM_CLOCK, **settings: Any) -> None:
        core = LedgerCore(store, clock=clock, **settings)
        self._core = core
        self._store = store
        self._ended = core.ended
        limits = Limits(core, store)
        leases = Leases(core, store, limits)
        reading = Reading(core, store)
        rollouts = Rollouts(core, store)
        declarations = Declarations(core, store)
        submission = Submission(core, store, rollouts, declarations)
        waits = Waits(core, store, submission, leases, reading)
        evidence = EvidenceRecords(core, store, leases)
        self._submission = submission
        self._leases = leases
        self._reading = reading
        self._waits = waits
        self._evidence = evidence
        self._rollouts = rollouts
        self._port: LeasePort = LedgerPort(
            core,
            store,
            leases=leases,
            limits=limits,
            reading=reading,
            submission=submission,
            waits=waits,
            rollouts=rollouts,
            evidence=evidence,
        )
        self._operations = Operations(
            core,
            tenants=Tenants(core, store),
            limits=limits,
            declarations=declarations,
            rollouts=rollouts,
            waits=waits,
            reading=reading,
            evidence=evidence,
            retention=Retention(core, store),
            schedules=Schedules(core, store, submission),
        )

    @property
    def operations(self) -> Operations:
        """Tenants and keys, limits, declarations, rollouts, purge and figures."""
        return self._operations

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload, result or checkpoint accepted (bytes of JSON)."""
        return self._core.max_payload_bytes

    # Lifecycle

    def migrate(self) -> builtins.list[int]:
        """Apply missing schema migrations (under a lock); return the versions applied now."""
        return self._core.migrate()

    def close(self) -> None:
        """Write any held-back events if the database answers, then release the connections."""
        self._core.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now(self) -> datetime:
        """The database's clock, the one arbiter of leases."""
        return self._core.now()

    # Submitting

    def submit(
        self,
        kind: str,
        payload: JSON,
        options: SubmitOptions | None = None,
        **changes: Unpack[SubmitKwargs],
    ) -> str:
        """Persist a job and return its id at once.

        Options come as a `SubmitOptions` value, as its fields' keywords
        (`idempotency_key=`, `tenant=`, `max_attempts=`, `priority=`, `run_after=`, `labels=`,
        `traceparent=`, `principal=`), or both (the keywords win). A key the tenant already used
        returns that job's id when kind and payload are the same JSON value (key order does not
        matter), and raises `IdempotencyConflict` otherwise.
        """
        job_id, _ = self.submit_or_find(kind, payload, options, **changes)
        return job_id

    def submit_or_find(
        self,
        kind: str,
        payload: JSON,
        options: SubmitOptions | None = None,
        **changes: Unpack[SubmitKwargs],
    ) -> tuple[str, bool]:
        """`submit`, also saying whether the job is new (False: the key's existing job)."""
        return self._submission.submit_or_find(kind, payload, submit_options(options, changes))

    def submit_many(
        self,
        kind: str,
        payloads: Sequence[JSON],
        options: SubmitOptions | None = None,
        **changes: Unpack[SubmitKwargs],
    ) -> builtins.list[str]:
        """Submit many jobs of one kind in one statement (one transaction on SQLite).

        All or nothing: a payload that is not JSON or too large rejects the whole batch before
        anything is written. No idempotency keys here: a keyed job goes through `submit`.
        Returns the new ids in the order of `payloads`; the options are every job's.
        """
        return self._submission.submit_many(kind, payloads, submit_options(options, changes))

    # Reading

    def get(self, job_id: str) -> Job:
        """The job as stored now; `JobNotFound` for an unknown or malformed id."""
        return self._reading.get(job_id)

    def list(
        self,
        state: JobState | str | None = None,
        kind: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        after: str | None = None,
        principal: str | None = None,
    ) -> builtins.list[Job]:
        """Jobs newest first; pass the last id of a page as `after` for the next page.
        `principal` keeps the jobs acting for it; ending in `/` (`user:42/`), for it and every
        principal under it."""
        return self._reading.list(state, kind, tenant, limit, after, principal)

    def events(self, job_id: str) -> builtins.list[Event]:
        """The job's flight recorder, oldest first."""
        return self._reading.events(job_id)

    def stages(self, job_id: str) -> builtins.list[Stage]:
        """The job's recorded steps and effects, in handler order."""
        return self._reading.stages(job_id)

    def evidence(self, job_id: str) -> builtins.list[Evidence]:
        """The references a job recorded, in the order first recorded."""
        return self._evidence.evidence(job_id)

    def job_cost(self, job_id: str) -> tuple[int, float]:
        """Tokens and dollars the job's attempts reported (`ctx.report_cost`), summed."""
        return self._rollouts.job_cost(job_id)

    def children(self, job_id: str) -> builtins.list[Job]:
        """The jobs this job spawned (`ctx.spawn`), in submission order."""
        return self._waits.children(job_id)

    def wait(self, job_id: str, timeout: float = 30.0) -> Job:
        """The job once terminal, or as it is when `timeout` seconds have passed.

        Woken when the job ends: the job is read when the wait starts, when it is woken and
        at the deadline, and no statement is spent while it waits.
        """
        return self._reading.wait(job_id, timeout)

    # Changing a job from outside

    def cancel(self, job_id: str) -> None:
        """Cancel a queued, running or waiting job and its unfinished children; each token is
        bumped so no running worker can publish. `TerminalJob` for an ended job."""
        self._reading.cancel(job_id)

    def requeue(self, job_id: str) -> None:
        """Make a failed or cancelled job claimable again from its saved step (attempt reset),
        with its failed or cancelled children (and theirs)."""
        self._reading.requeue(job_id)

    def signal(self, job_id: str, name: str, payload: JSON = None) -> bool:
        """Send the job a signal: stored once per job and name, the first wins.

        True when this call stored it; False for a repeat with the same payload. Raises
        `SignalConflict` for a different payload under a stored name, `TerminalJob` for a new
        name sent to an ended job, `JobNotFound` for an unknown id. A signal may arrive before
        the job waits for it; a job waiting for it is woken.
        """
        return self._waits.signal(job_id, name, payload)

    # Leases by hand (a worker does all of this for its handlers)

    def claim(
        self,
        owner_id: str,
        *,
        kinds: Sequence[str] | None = None,
        lease_seconds: float = 90.0,
        variants: Mapping[str, Sequence[str]] | None = None,
    ) -> Lease | None:
        """Atomically take the best claimable job (priority, then age), or None.

        Claimable: queued and due, or running with an expired lease (by the database's clock).
        The claim raises the job's fencing token and attempt. It also settles expired leases
        of the kinds asked for: a job with no attempts left becomes `failed` (`lease_expired`).
        """
        return self._leases.claim(
            owner_id, kinds=kinds, lease_seconds=lease_seconds, variants=variants
        )

    def extend(self, lease: Lease, lease_seconds: float | None = None) -> datetime:
        """Renew the lease from the database's now; return the new lease end. `LeaseLost`
        when the lease no longer holds, `OwnershipUnknown` when the database does not answer."""
        return self._leases.extend(lease, lease_seconds)

    def save_step(self, lease: Lease, step: int, checkpoint: JSON = None) -> None:
        """Advance the job's cursor to `step` and keep `checkpoint`, while the lease holds."""
        self._leases.save_step(lease, step, checkpoint)

    def complete(self, lease: Lease, result: JSON = None) -> None:
        """Publish the result and end the job `succeeded`, while the lease holds. A stale
        lease raises `LeaseLost`; the rejected result is recorded as an event (size and hash
        only) and never becomes the job's result."""
        self._leases.complete(lease, result)

    def fail(
        self,
        lease: Lease,
        error: JSON,
        *,
        retryable: bool = True,
        retry_in: float | None = None,
        token_floor: int | None = None,
    ) -> JobState:
        """Fail this attempt; return the job's new state.

        Retryable with attempts left: queued again after an exponential, jittered backoff (or
        `retry_in` seconds); otherwise the job ends `failed`. `token_floor`, a receiver's
        highest accepted token for the job (`StaleFence.highest`), puts the job's next claim
        above it.
        """
        return self._leases.fail(
            lease, error, retryable=retryable, retry_in=retry_in, token_floor=token_floor
        )

    def release(self, lease: Lease) -> None:
        """Give the job back at once, without spending the attempt (graceful shutdown)."""
        self._leases.release(lease)

    if not TYPE_CHECKING:  # type checkers see the faces alone

        def __getattr__(self, name: str) -> Any:
            if name in _TO_OPERATIONS:
                target: object = self._operations
                where = f"ledger.operations.{name}"
            elif name in _TO_PORT:
                target = self._port
                where = f"the worker's port (tenure.ledger.lease_port(ledger).{name})"
            elif name in ("store", "ended"):
                target, where, name = self, "nothing: it is private to the ledger", f"_{name}"
            else:
                raise AttributeError(f"'Ledger' object has no attribute {name!r}")
            renamed(f"Ledger.{name.lstrip('_')}", where)
            return getattr(target, name)


def lease_port(ledger: Ledger) -> LeasePort:
    """The worker's port of `ledger` (`tenure.port.LeasePort`): what the worker runtime uses."""
    return ledger._port
