"""The worker's port: what the worker runtime needs of a ledger, and nothing else.

`tenure.runtime` is typed against `LeasePort` alone: the ledger's implementation is
`tenure.ledger.lease_port(ledger)`, and `tenure.testing.MemoryPort` keeps the same protocol in
memory for handler tests (`tenure.testing.run_handler`). The application's face is
`tenure.Ledger`; nothing here is part of it, so the worker's protocol can change without
changing the public API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from tenure.budgets import Budget
from tenure.errors import TenureError
from tenure.evidence import DocumentRef, Evidence, Reference
from tenure.rates import RateClaim, RateRule
from tenure.types import (
    JSON,
    CancelReason,
    EventType,
    ExtendResult,
    Job,
    JobState,
    Lease,
    Stage,
    StageKind,
)
from tenure.waits import WaitOutcome, WaitRequest


class LeasePort(Protocol):
    """Claims, renewals, stages, outcomes and waits of leases, as the worker runtime uses them.

    Every write that acts for a lease is conditional on the lease (`LeaseLost` when it is not
    held; `OwnershipUnknown` when the database cannot say), as in `tenure.Ledger`.
    """

    @property
    def where(self) -> str:
        """Where the jobs live, for logs (a URL without its password, or a file)."""
        ...

    @property
    def parallel_writes(self) -> bool:
        """Whether writes from several threads proceed in parallel (PostgreSQL) or in turn."""
        ...

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload, result or checkpoint accepted (bytes of JSON)."""
        ...

    def now(self) -> datetime:
        """The database's clock."""
        ...

    def close(self) -> None:
        """Release connections (the port's owner closes it once)."""
        ...

    def on_claimable(
        self,
        callback: Callable[[str], None],
        on_cancelled: Callable[[str, int], None] | None = None,
    ) -> Callable[[], None]:
        """Best-effort wake-ups: `callback(kind)` when jobs may be claimable,
        `on_cancelled(job_id, token)` when one is cancelled; returns what stops them."""
        ...

    def has_tenant_limits(self) -> bool:
        """Whether any tenant has a concurrency limit (claims then take the limited path)."""
        ...

    def claim_many(
        self,
        owner_id: str,
        *,
        limit: int,
        kinds: Sequence[str] | None = None,
        lease_seconds: float = 90.0,
        kind_limits: Mapping[str, int] | None = None,
        variants: Mapping[str, Sequence[str]] | None = None,
        rescue: bool = True,
        rates: RateClaim | None = None,
        rescue_shared: bool = False,
    ) -> list[Lease]:
        """Up to `limit` claims in one statement; with `rescue`, expired leases too (with
        `rescue_shared`, in turns with the other claimers of these kinds: `ClaimRequest`); with
        `rates`, each rate key within its rate (`rates.next_in`: when a held key has room)."""
        ...

    def complete_and_claim(
        self,
        outcomes: Sequence[tuple[Lease, JSON]],
        owner_id: str,
        *,
        limit: int,
        kinds: Sequence[str] | None = None,
        lease_seconds: float = 90.0,
        variants: Mapping[str, Sequence[str]] | None = None,
        rescue: bool = True,
        rescue_shared: bool = False,
    ) -> tuple[dict[str, TenureError | None], list[Lease]]:
        """Publish results and take the next jobs in one round trip."""
        ...

    def extend_many(
        self, leases: Sequence[Lease], lease_seconds: float | None = None
    ) -> ExtendResult:
        """Renew many leases in one statement; lost ones are reported, not raised."""
        ...

    def report_unconfirmed(self, lease: Lease, last_confirmed: datetime) -> None:
        """The conservative deadline passed unconfirmed: `ownership_unknown`."""
        ...

    def lost_reason(self, job_id: str) -> CancelReason:
        """Why a lease write found no row (`cancelled`, `job_missing` or `lease_lost`)."""
        ...

    def get(self, job_id: str) -> Job:
        """The job as it is now."""
        ...

    def stages(self, job_id: str) -> list[Stage]:
        """The job's recorded stages, in order (what a new attempt replays)."""
        ...

    def save_step(self, lease: Lease, step: int, checkpoint: JSON = None) -> None:
        """Advance the cursor and keep the checkpoint, while the lease holds."""
        ...

    def start_stage(
        self,
        /,
        lease: Lease,
        position: int,
        name: str,
        kind: StageKind,
        *,
        effect_key: str | None = None,
        timeout_seconds: float | None = None,
        **detail: Any,
    ) -> None:
        """The write-ahead record of a step or effect about to run."""
        ...

    def stage_raised(self, lease: Lease, position: int, error_type: str) -> None:
        """A step's function raised: the step failed (it is not in doubt)."""
        ...

    def finish_stage(
        self, lease: Lease, position: int, result: JSON, *, checkpoint: JSON = None
    ) -> str:
        """A stage's result, recorded; returns its canonical JSON text."""
        ...

    def complete(self, lease: Lease, result: JSON = None) -> None:
        """Publish the result (`LeaseLost` if stale)."""
        ...

    def complete_many(
        self, outcomes: Sequence[tuple[Lease, JSON]]
    ) -> dict[str, TenureError | None]:
        """`complete` for many leases at once; per job, None or the error."""
        ...

    def fail(
        self,
        lease: Lease,
        error: JSON,
        *,
        retryable: bool = True,
        retry_in: float | None = None,
        token_floor: int | None = None,
    ) -> JobState:
        """Fail this attempt: queued again with backoff, or ended `failed`."""
        ...

    def release(self, lease: Lease) -> None:
        """Give the job back without spending the attempt."""
        ...

    def hold_for_budget(self, lease: Lease, seen: Budget | None = None) -> None:
        """Give the job back without spending the attempt, held until its budget is raised;
        released at once if a raise came after the run's last look at its budget (`seen`)."""
        ...

    def rate_limited(self, lease: Lease, rule: RateRule | None, retry_after: float) -> None:
        """Hold the job's rate key (its class's `rule`, if any) for `retry_after` seconds and
        give the job back without spending the attempt, due again then."""
        ...

    def record(self, /, lease: Lease, event: EventType, **detail: Any) -> None:
        """Append an event about the lease's job (no lease check)."""
        ...

    def spawn(
        self,
        lease: Lease,
        name: str,
        kind: str,
        payload: JSON,
        *,
        max_attempts: int | None = None,
        priority: int | None = None,
        principal: str | None = None,
        budget: Mapping[str, float] | None = None,
    ) -> tuple[str, bool]:
        """Submit the lease's job's child `name` once (within its run's budget); its id and
        whether it is new."""
        ...

    def wait_on(self, lease: Lease, request: WaitRequest) -> WaitOutcome:
        """Settle the wait if its condition holds, else suspend the job."""
        ...

    def report_cost(
        self,
        job_id: str,
        attempt: int,
        tokens: int = 0,
        usd: float = 0.0,
        units: Mapping[str, float] | None = None,
        *,
        budgeted: bool = True,
    ) -> Budget | None:
        """Record what an attempt spent, charged to its run's budgets; what the run has left
        (`budgeted=False`, the lease's `budgeted`: the run has none, its chain is not read)."""
        ...

    def budget(self, job_id: str) -> Budget | None:
        """What the job's run may still spend (None: no budget in its chain)."""
        ...

    def record_evidence(
        self, lease: Lease, ref: Reference, *, retriever: str | None = None
    ) -> None:
        """Record a reference for the lease's job while the lease holds."""
        ...

    def evidence(self, job_id: str) -> list[Evidence]:
        """The references a job recorded."""
        ...

    def cached_refs(self, tenant: str, key: str) -> list[DocumentRef] | None:
        """The tenant's cached refs under `key` (None: a miss)."""
        ...

    def cache_refs(
        self,
        tenant: str,
        key: str,
        retriever: str,
        refs: list[DocumentRef],
        ttl_seconds: float,
    ) -> None:
        """Cache a search's refs for the tenant."""
        ...

    def record_retrieval(self, /, lease: Lease, **detail: Any) -> None:
        """The `evidence_retrieved` event (ids and counts, never content)."""
        ...
