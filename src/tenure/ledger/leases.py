"""The lease protocol: claim, renew, record stages, publish, fail, release.

Every write that acts for a lease is conditional on the lease still being held by the
database's clock (the `-- guard: lease` blocks of each dialect's `.sql` files); zero rows raise
`LeaseLost` and are recorded as `result_rejected` (or `heartbeat_lost`). A database that cannot
be reached during a lease write raises `OwnershipUnknown`.
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn, Protocol, TypeVar

from tenure.backoff import backoff_delay
from tenure.budgets import HELD_FOR_BUDGET, Budget
from tenure.errors import (
    InvalidArgument,
    LeaseLost,
    OwnershipUnknown,
    StoreUnavailable,
    TenureError,
)
from tenure.ledger.core import LedgerCore, Part, event_detail
from tenure.ledger.limits import Limits
from tenure.logs import emit
from tenure.rates import RateClaim, RateRule
from tenure.storage.base import (
    NO_CLAIM,
    AttemptFailure,
    ClaimRequest,
    JobStore,
    LeaseStore,
    Publish,
    StageStart,
    StageStore,
)
from tenure.types import (
    JSON,
    CancelReason,
    EventType,
    ExtendResult,
    JobState,
    Lease,
    StageKind,
)
from tenure.validation import (
    MAX_CHECKPOINT_DEPTH,
    EncodedJson,
    check_int,
    check_name,
    check_seconds,
    encode_json,
)

log = logging.getLogger("tenure")
T = TypeVar("T")


def check_lease(value: Any, what: str = "lease") -> Lease:
    """The argument is a `Lease` (from claim()), or the call is refused naming it."""
    if not isinstance(value, Lease):
        raise InvalidArgument(
            f"the {what} must be a tenure.Lease (as claim() returns), got {type(value).__name__}"
        )
    return value


class LeaseWrites(LeaseStore, StageStore, JobStore, Protocol):
    """What `Leases` uses of the store: claims, renewals, stages, outcomes and the jobs."""


class Leases(Part[LeaseWrites]):
    """The lease-guarded operations of the `Ledger`."""

    def __init__(self, core: LedgerCore, store: LeaseWrites, limits: Limits) -> None:
        super().__init__(core, store)
        self.limits = limits

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
        The claim increments the job's fencing token and attempt. It also settles expired
        leases of the kinds asked for: a job with no attempts left becomes `failed`
        (`lease_expired`).
        """
        leases = self.claim_many(
            owner_id, limit=1, kinds=kinds, lease_seconds=lease_seconds, variants=variants
        )
        return leases[0] if leases else None

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
        """Like `claim`, for up to `limit` jobs in one statement (one transaction on SQLite).

        With `kind_limits` ({kind: n}), or once any tenant has a limit (`set_tenant_limit`),
        the claim keeps every kind and tenant within its limit, across workers: a serialised
        transaction of a few statements instead of one. `variants` ({kind: [variant, ...]},
        "stable" for jobs without one): of those kinds, claim only those variants.
        `rescue=False` leaves expired leases to a later claim (a worker rescues once a
        second; see `ClaimRequest`); `rescue_shared=True` searches for them in turns with the
        other claimers of these kinds (a worker's claims: about one search a second for a fleet),
        and reads the queue from its head only on its turn (otherwise from its floor).
        `rates` (the kinds' `tenure.Rate`s and keys) keeps each
        rate key within its rate across workers, and tells when a held key has room again.
        """
        request = _claim_request(
            owner_id, kinds, lease_seconds, limit, variants, rescue, rescue_shared
        )
        limits = {
            check_name(kind, "kind"): check_int(n, f"concurrency limit of {kind!r}", 1)
            for kind, n in (kind_limits or {}).items()
            if request.kinds is None or kind in request.kinds
        }
        scoped = None
        if rates is not None:
            rates.next_in = None
            kinds = request.kinds
            scoped = RateClaim(
                {k: r for k, r in rates.rules.items() if kinds is None or k in kinds}
            )
        if limits or self.limits.has_tenant_limits() or (scoped is not None and scoped.rules):
            leases = self.store.limited_claim(request, limits, scoped)
            if rates is not None and scoped is not None:
                rates.next_in = scoped.next_in
        else:
            leases = self.store.claim(request)
        self._log_claims(leases, request.owner_id)
        return leases

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
    ) -> tuple[dict[str, TenureError | None], builtins.list[Lease]]:
        """`complete_many` and `claim_many` in one statement: a busy worker publishes what it
        finished and takes its next jobs in one round trip. Returns the answers per job (as
        `complete_many`) and the new leases."""
        request = _claim_request(
            owner_id, kinds, lease_seconds, limit, variants, rescue, rescue_shared
        )
        answers, leases = self._publish(outcomes, request)
        self._log_claims(leases, request.owner_id)
        return answers, leases

    @staticmethod
    def _log_claims(leases: Sequence[Lease], owner_id: str) -> None:
        if not log.isEnabledFor(logging.DEBUG):  # one line per job: DEBUG (the events table
            return  # records every claim; a worker logs a `jobs` summary at INFO)
        for lease in leases:
            emit(
                log,
                logging.DEBUG,
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
        check_lease(lease)
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
        leases = [check_lease(lease, "lease in leases") for lease in leases]
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
                self.core.ownership_unknown(lease, "extend", exc)
            raise OwnershipUnknown(
                f"could not renew {len(leases)} lease(s): {exc}; start no new irreversible step"
            ) from exc
        self.core.confirm_unconfirmed()
        lost = [lease.job_id for lease in leases if lease.job_id not in renewed]
        for lease in leases:
            if lease.job_id in lost:
                self._reject(lease, EventType.HEARTBEAT_LOST, "extend")
            else:
                emit(
                    log,
                    logging.DEBUG,  # per lease and per beat: the keeper logs a summary at INFO
                    "heartbeat_ok",
                    job=lease.job_id,
                    token=lease.token,
                    lease_until=renewed[lease.job_id],
                )
        return ExtendResult(renewed=renewed, lost=lost)

    def _checkpoint_json(self, checkpoint: JSON) -> EncodedJson:
        return encode_json(
            checkpoint, "checkpoint", self.core.max_payload_bytes, MAX_CHECKPOINT_DEPTH
        )

    def save_step(self, lease: Lease, step: int, checkpoint: JSON = None) -> None:
        """Advance the job's cursor to `step` and keep `checkpoint`, while the lease holds."""
        check_lease(lease)
        step = check_int(step, "step", 0)
        encoded = self._checkpoint_json(checkpoint)
        detail = event_detail(
            step=step, checkpoint_bytes=encoded.size, checkpoint_sha256=encoded.sha256
        )
        done = self.guard(
            lease, "save_step", lambda: self.store.save_step(lease, step, encoded.text, detail)
        )
        if not done:
            self.lost(lease, "save_step")

    def complete(self, lease: Lease, result: JSON = None) -> None:
        """Publish the result and end the job `succeeded`, while the lease holds.

        A stale lease raises `LeaseLost`; the rejected result is recorded as an event (its size
        and hash only) and never becomes the job's result.
        """
        check_lease(lease)
        answer = self.complete_many([(lease, result)])[lease.job_id]
        if answer is not None:
            raise answer

    def complete_many(
        self, outcomes: Sequence[tuple[Lease, JSON]]
    ) -> dict[str, TenureError | None]:
        """`complete` for many leases in one statement (one transaction on SQLite).

        Returns, per job id, None when published, or the error `complete` would have raised
        for that job alone (`LeaseLost`, `PayloadTooLarge`, …). Raises `OwnershipUnknown` for
        all of them when the database cannot be reached.
        """
        return self._publish(outcomes, NO_CLAIM)[0]

    def _publish(
        self, outcomes: Sequence[tuple[Lease, JSON]], request: ClaimRequest
    ) -> tuple[dict[str, TenureError | None], builtins.list[Lease]]:
        """Encode each result (refusing bad ones alone), write, and answer per job."""
        answers: dict[str, TenureError | None] = {}
        leases: builtins.list[Lease] = []
        texts: builtins.list[str] = []
        details: builtins.list[str] = []
        digests: dict[str, str] = {}
        for lease, result in outcomes:
            try:
                encoded = encode_json(result, "result", self.core.max_payload_bytes)
            except TenureError as exc:
                answers[lease.job_id] = exc
                continue
            leases.append(lease)
            texts.append(encoded.text)
            # event_detail(result_bytes=…, result_sha256=…), written out: once per job.
            details.append(f'{{"result_bytes":{encoded.size},"result_sha256":"{encoded.sha256}"}}')
            digests[lease.job_id] = encoded.sha256
        if not leases and not request.limit:
            return answers, []
        try:
            done, claimed = self.store.exchange(Publish(leases, texts, details), request)
        except StoreUnavailable as exc:
            for lease in leases:
                self.core.ownership_unknown(lease, "complete", exc)
            raise OwnershipUnknown(
                f"could not complete {len(leases)} job(s): {exc}; whether their leases still "
                "hold is unknown"
            ) from exc
        self.core.confirm_unconfirmed()
        for lease in leases:
            if lease.job_id in done:
                answers[lease.job_id] = None
                continue
            try:
                self.lost(lease, "complete", result_sha256=digests[lease.job_id])
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
        token_floor: int | None = None,
    ) -> JobState:
        """Fail this attempt. Retryable with attempts left: queued again after an exponential,
        jittered backoff (or `retry_in` seconds). Otherwise the job ends `failed`.

        `token_floor`, a receiver's highest accepted token for the job (`StaleFence.highest`),
        puts the job's next claim above it: a receiver that saw a token this database forgot
        (a lost history) must not keep refusing the job.

        Returns the job's new state.
        """
        check_lease(lease)
        floor = 0 if token_floor is None else check_int(token_floor, "token_floor", 0, 2**63 - 1)
        if isinstance(error, str):
            error = {"code": "error", "message": error}
        encoded = encode_json(error, "error", self.core.max_payload_bytes)
        delay: float | None = None
        if retryable:
            delay = (
                check_seconds(retry_in, "retry_in")
                if retry_in is not None
                else backoff_delay(lease.attempt, self.core.backoff_base, self.core.backoff_cap)
            )
        code = error.get("code") if isinstance(error, dict) else None
        floored = {"token_floor": floor} if floor else {}
        detail = event_detail(
            code=code if isinstance(code, str) else None,
            retryable=retryable,
            error_sha256=encoded.sha256,
            **floored,
        )
        failure = AttemptFailure(encoded.text, delay, detail, floor)
        state = self.guard(lease, "fail", lambda: self.store.fail(lease, failure))
        if state is None:
            self.lost(lease, "fail")
        if state is JobState.FAILED:
            self._cancel_children(lease.job_id)
        return state

    def _cancel_children(self, job_id: str) -> None:
        """A parent that ended failed leaves no child working for it: each unfinished child
        (and its descendants) is cancelled, tokens bumped, as a cancel of the parent would."""
        for child in self.store.children(job_id):
            if not child.terminal and self.store.cancel(child.id):
                emit(log, logging.INFO, "job_cancelled", job=child.id, by_parent=job_id)

    def release(self, lease: Lease) -> None:
        """Give the job back at once, without spending the attempt (graceful shutdown)."""
        check_lease(lease)
        if not self.guard(lease, "release", lambda: self.store.release(lease)):
            self.lost(lease, "release")

    def hold_for_budget(self, lease: Lease, seen: Budget | None = None) -> None:
        """Its run's budget is spent (or its handler says so) and its class says hold: give
        the job back without spending the attempt, held (due in centuries) until
        `raise_budget` releases it. `seen` is the run's last look at its budget: a raise that
        came after it releases the job at once (the raise may not have seen it held)."""
        check_lease(lease)
        detail = json.dumps({"reason": "budget_exhausted", "held": True})
        held = lambda: self.store.release(lease, HELD_FOR_BUDGET, detail)  # noqa: E731
        if not self.guard(lease, "release", held):
            self.lost(lease, "release")
        # A raise that committed between the worker's look at the budget and this hold did
        # not see the job held: look again now, and release it if a raise gave it room.
        if seen is None:
            return
        try:
            if self.store.release_if_raised(lease.job_id, seen.ceilings):
                emit(log, logging.INFO, "budget_hold_released", job=lease.job_id)
        except StoreUnavailable:  # the hold is written; the next raise releases the job
            emit(log, logging.WARNING, "budget_recheck_failed", job=lease.job_id)

    def rate_limited(self, lease: Lease, rule: RateRule | None, retry_after: float) -> None:
        """The handler met its provider's limit: hold the job's rate key (if its class has a
        `rule`) for `retry_after` seconds on every worker, and give the job back without
        spending the attempt, due again then. The event says why and how long, never the key.
        (Two writes: a release that fails after the hold leaves the key held, the job with
        the lease it had.)"""
        check_lease(lease)
        seconds = 0.0 if retry_after == 0 else check_seconds(retry_after, "retry_after")
        key = None if rule is None else rule.key_for(lease.payload)
        # No claim before the hold ends, whatever burst the rate allows ahead of its pace.
        hold = seconds + (0.0 if rule is None else rule.rate.tolerance)
        detail = json.dumps({"reason": "rate_limited", "retry_after": seconds})

        def hold_and_release() -> bool:
            if key is not None:
                self.store.hold_rate_key(key, hold)
            return self.store.release(lease, seconds, detail)

        if not self.guard(lease, "release", hold_and_release):
            self.lost(lease, "release")

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
        """Write-ahead record of a step or effect about to run, while the lease holds; with
        `timeout_seconds` (the class's stage timeout) the database can tell it is overdue."""
        check_int(position, "stage position", 0)
        check_name(name, "stage name")
        if kind is StageKind.EFFECT and effect_key is None:
            raise InvalidArgument(f"effect {name!r} needs its effect_key (what it sends)")
        detail_json = event_detail(position=position, name=name, **detail)
        done = self.guard(
            lease,
            "start_stage",
            lambda: self.store.stage_start(
                lease, StageStart(position, name, kind, effect_key, detail_json, timeout_seconds)
            ),
        )
        if not done:
            self.lost(lease, "start_stage")

    def stage_raised(self, lease: Lease, position: int, error_type: str) -> None:
        """A step's function raised (the worker did not die in it): the step is a failed one,
        not one in doubt, and the next attempt runs it afresh. `step_failed` keeps the type."""
        detail_json = event_detail(position=position, error_type=error_type)
        done = self.guard(
            lease, "stage_raised", lambda: self.store.stage_raised(lease, position, detail_json)
        )
        if not done:
            self.lost(lease, "stage_raised")

    def finish_stage(
        self, lease: Lease, position: int, result: JSON, *, checkpoint: JSON = None
    ) -> str:
        """Record a stage's result and advance the cursor past it, while the lease holds;
        with `checkpoint`, store it as the job's checkpoint in the same write.

        Returns the result's canonical JSON text (what a replay will return).
        """
        encoded = encode_json(result, "stage result", self.core.max_payload_bytes)
        saved = None if checkpoint is None else self._checkpoint_json(checkpoint).text
        detail_json = event_detail(
            position=position, result_bytes=encoded.size, result_sha256=encoded.sha256
        )
        done = self.guard(
            lease,
            "finish_stage",
            lambda: self.store.stage_done(lease, position, encoded.text, detail_json, saved),
        )
        if not done:
            self.lost(lease, "finish_stage")
        return encoded.text

    def lost_reason(self, job_id: str) -> CancelReason:
        """Why a lease write found no row: `cancelled` when an operator cancelled the job,
        `job_missing` when the job is gone (a failover or a restore lost its row), else
        `lease_lost` (also when the database cannot say)."""
        try:
            job = self.store.get(job_id)
        except StoreUnavailable:
            return CancelReason.LEASE_LOST
        if job is None:
            return CancelReason.JOB_MISSING
        if job.state is JobState.CANCELLED:
            return CancelReason.CANCELLED
        return CancelReason.LEASE_LOST

    def record(self, /, lease: Lease, event: EventType, **detail: Any) -> None:
        """Append an event about this lease's job (e.g. `step_in_doubt`); no lease check."""
        self.store.record_event(
            lease.job_id, event, lease.token, lease.owner_id, event_detail(**detail)
        )

    def guard(self, lease: Lease, operation: str, write: Callable[[], T]) -> T:
        """Run a lease-guarded write; an unreachable database means ownership is unknown."""
        try:
            result = write()
        except StoreUnavailable as exc:
            self.core.ownership_unknown(lease, operation, exc)
            raise OwnershipUnknown(
                f"job {lease.job_id}: {operation} could not reach the database ({exc}); "
                "whether the lease still holds is unknown"
            ) from exc
        self.core.confirm_unconfirmed()
        return result

    def lost(self, lease: Lease, operation: str, **detail: Any) -> NoReturn:
        """Record the rejected write, then raise `LeaseLost`: also when the held job is gone
        from the database (a failover or a restore lost its row; `lost_reason` says
        `job_missing`), which stops that attempt and never the worker."""
        if self._reject(lease, EventType.RESULT_REJECTED, operation, **detail):
            why = f"token {lease.token} no longer holds the lease"
        else:
            why = "the job is gone from the database (a failover or a restore lost its row)"
        raise LeaseLost(
            f"job {lease.job_id}: {why}; the {operation} was rejected and nothing was published"
        )

    def _reject(self, lease: Lease, event: EventType, operation: str, **detail: Any) -> bool:
        """Record a write that found no row (its event) and log it; False when the job itself
        is gone (there is nothing to record it on)."""
        exists = self.store.record_event(
            lease.job_id,
            event,
            lease.token,
            lease.owner_id,
            event_detail(operation=operation, reason="zero_rows", **detail),
        )
        emit(
            log,
            logging.WARNING,
            event,
            job=lease.job_id,
            token=lease.token,
            owner=lease.owner_id,
            operation=operation,
            reason="zero_rows" if exists else CancelReason.JOB_MISSING.value,
        )
        return exists


def _claim_request(
    owner_id: str,
    kinds: Sequence[str] | None,
    lease_seconds: float,
    limit: int,
    variants: Mapping[str, Sequence[str]] | None = None,
    rescue: bool = True,
    rescue_shared: bool = False,
) -> ClaimRequest:
    """A validated claim: bad input raises `InvalidArgument` before anything is sent."""
    for name, flag in (("rescue", rescue), ("rescue_shared", rescue_shared)):
        if not isinstance(flag, bool):
            raise InvalidArgument(f"{name} must be True or False, not {type(flag).__name__}")
    return ClaimRequest(
        owner_id=check_name(owner_id, "owner id"),
        kinds=_kinds(kinds),
        lease_seconds=check_seconds(lease_seconds, "lease_seconds"),
        limit=check_int(limit, "limit", 1),
        pinned=pinned_variants(variants),
        rescue=rescue,
        rescue_shared=rescue_shared,
    )


def pinned_variants(variants: Mapping[str, Sequence[str]] | None) -> tuple[str, ...]:
    """{kind: [variant, ...]} as the claim's "kind@variant" entries (checked)."""
    entries: list[str] = []
    for kind, names in (variants or {}).items():
        check_name(kind, "kind")
        if isinstance(names, str) or not names:
            raise InvalidArgument(f"the variants of {kind!r} must be a non-empty list of names")
        entries += [f"{kind}@{check_name(name, 'variant')}" for name in names]
    return tuple(sorted(set(entries)))


def _kinds(kinds: Sequence[str] | None) -> list[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        raise InvalidArgument("kinds must be a list of kind names, not one string")
    return [check_name(kind, "kind") for kind in kinds]
