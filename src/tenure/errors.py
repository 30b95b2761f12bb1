"""The exception tree of tenure. Imports nothing from tenure."""

from __future__ import annotations

import enum
import warnings
from typing import Any, ClassVar


def renamed(old: str, new: str) -> None:
    """Warn that `old` is a deprecated name of `new`, at the caller's caller."""
    warnings.warn(f"{old} is deprecated: use {new} (removed in 0.3)", DeprecationWarning, 3)


class TenureError(Exception):
    """Base of every error tenure raises on purpose (except `JobCancelled`).

    `error_code` names the class on the wire (the HTTP API's `error.code`, the client's way
    back to the class); `http_status` is the status the service answers it with (500: a
    failure the API does not expose, answered `internal_error`).
    """

    error_code: ClassVar[str] = "tenure_error"
    http_status: ClassVar[int] = 500

    def __init_subclass__(cls, *, code: str | None = None, status: int | None = None) -> None:
        """`class X(TenureError, code="x", status=409)`: the class's wire code and status."""
        super().__init_subclass__()
        if code is not None:
            cls.error_code = code
        if status is not None:
            cls.http_status = status


class InvalidArgument(TenureError, ValueError, code="invalid_argument", status=422):
    """Bad input to a tenure call; nothing was written."""


class PayloadTooLarge(InvalidArgument, code="payload_too_large", status=413):
    """A payload, result, checkpoint or error document exceeds the configured size limit."""


class UnsupportedDatabase(InvalidArgument, code="unsupported_database"):
    """The database URL names a scheme tenure does not know."""


class Unavailable(TenureError, code="unavailable"):
    """Something tenure depends on did not answer: the database, or the service a client
    calls. Retry later."""


class StoreUnavailable(Unavailable, code="database_unavailable", status=503):
    """The database could not be reached or did not answer in time."""


class StoreRejected(TenureError, code="store_rejected"):
    """The database refused a statement for a reason that retrying cannot fix. Not an outage:
    the database answered, so a lease write that meets it has not lost track of ownership."""


class StoreConflict(StoreRejected, code="store_conflict"):
    """A statement would break a constraint of the schema (a conflict with what is stored)."""


class StoreBug(StoreRejected, code="store_bug"):
    """The database could not run a statement as written (a bug in tenure, or a schema that
    was changed by hand): report it, with the message."""


class ServiceUnavailable(Unavailable, code="service_unavailable"):
    """`tenure.Client`: the service did not answer (refused, reset, timed out) or answered that
    its database is away (503)."""


class OwnershipUnknown(StoreUnavailable, code="ownership_unknown"):
    """A lease operation could not reach the database: the worker may or may not still own the job.

    Start no new irreversible step; keep trying to confirm the lease while time remains.
    """


class LeaseLost(TenureError, code="lease_lost"):
    """A conditional write found no row: this worker no longer owns the job. Publish nothing."""


class ToolOutcomeUnknown(TenureError, code="tool_outcome_unknown"):
    """A tool call timed out: its effect may or may not have happened. Retry with the same key."""


class IdempotencyConflict(TenureError, code="idempotency_conflict", status=409):
    """An idempotency key was reused by the tenant with a different kind or payload."""


class JobNotFound(TenureError, LookupError, code="not_found", status=404):
    """No job has that id (or the id is malformed)."""


class TenantExists(TenureError, code="tenant_exists"):
    """`create_tenant` for a name already taken (issue another key with `issue_key`)."""


class TenantNotFound(TenureError, LookupError, code="tenant_not_found"):
    """No tenant has that name."""


class InvalidJobClass(TenureError, code="invalid_job_class"):
    """A job class was declared with unsafe or impossible lease arithmetic."""


class NonRetryable(TenureError, code="non_retryable"):
    """Raised by a handler for an error that retrying cannot fix (validation, permission).

    `code` becomes the failed job's error code; the message, written by the developer for the
    operator, is kept in the job's `error` (its first `MAX_MESSAGE` characters) unless the app
    was made with `keep_error_messages=False`. Logs and events carry the code only.
    """

    MAX_MESSAGE = 1000

    def __init__(self, message: str = "", code: str = "non_retryable") -> None:
        super().__init__(message or code)
        self.code = code
        self.message = message

    def error_document(self, keep_message: bool = True) -> dict[str, str]:
        """The failed job's `error`: the code, and the message when kept."""
        if keep_message and self.message:
            return {"code": self.code, "message": self.message[: self.MAX_MESSAGE]}
        return {"code": self.code}


class StageMismatch(NonRetryable, code="stage_mismatch"):
    """A replayed handler asked for a different step or effect than the one recorded there."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="stage_mismatch")


class AccessDenied(TenureError, code="access_denied"):
    """The service refused the API key (401) or the key's tenant may not do this (403)."""


class PrincipalNotAllowed(AccessDenied, code="principal_not_allowed", status=403):
    """The key is bound to a principal, and the call named another (nothing was written)."""


class JobFailed(TenureError, code="job_failed"):
    """`Client.result`: the job ended failed or cancelled (`job` holds its state and error)."""

    def __init__(self, job: Any) -> None:
        super().__init__(f"job {job.id} ended {job.state.value}: {job.error}")
        self.job = job


class SignalConflict(TenureError, code="signal_conflict", status=409):
    """A signal of that name was already stored for the job with a different payload."""


class WaitTimeout(NonRetryable, code="wait_timeout"):
    """A wait (`ctx.wait_for`, `ctx.wait_job`) reached its timeout before its condition held.
    Raised in the resumed handler; uncaught, it fails the job (the outcome is recorded, so a
    retry would only meet it again)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="wait_timeout")


class ChildFailed(NonRetryable, code="child_failed"):
    """A child job awaited by `ctx.wait_job` ended failed or cancelled."""

    def __init__(self, child_id: str, state: str, error: Any) -> None:
        super().__init__(f"child job {child_id} ended {state}", code="child_failed")
        self.child_id = child_id
        self.state = state
        self.error = error


class InvalidTransition(TenureError, code="invalid_transition", status=409):
    """The job's state does not allow the requested operation."""


class TerminalJob(InvalidTransition, code="terminal_job", status=409):
    """The job is already succeeded, failed or cancelled."""


class StaleFence(TenureError, code="stale_fence", status=409):
    """A receiver refused a command whose fencing token is below the highest it accepted.

    `highest` is the receiver's highest accepted token for the scope, when it said (a worker
    whose own lease is still valid floors the job's token there, so its next claim is above).
    """

    def __init__(
        self,
        message: str = "",
        *,
        highest: int | None = None,
        scope: str | None = None,
        token: int | None = None,
        fence: int | None = None,
    ) -> None:
        super().__init__(message or self.error_code)
        if fence is not None:
            renamed("StaleFence(fence=)", "StaleFence(token=)")
            token = fence if token is None else token
        self.highest = highest
        self.scope = scope
        self.token = token
        """The refused command's token (`"fence"` in the 409 body, as its header says)."""

    @property
    def fence(self) -> int | None:
        """Deprecated name of `token` (removed in 0.3)."""
        renamed("StaleFence.fence", "StaleFence.token")
        return self.token


class FenceConflict(StaleFence, code="fence_conflict", status=409):
    """A receiver refused a command whose fencing token equals the highest it accepted, sent by
    another claim (invariant 17): two holders of one token, which only a database that lost
    part of its history can make. The first holder keeps the token; this one is refused."""


class CommitUnconfirmed(StoreUnavailable, code="commit_unconfirmed"):
    """The database committed locally but its wait for the synchronous standby was cancelled
    (PostgreSQL's WARNING on commit): a failover now could lose the write. Not acknowledged;
    retry it (a submit with an idempotency key is safe to retry)."""


class ResumeRefused(TenureError, code="resume_refused"):
    """A resume check refused to continue a job from its checkpoint."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class CancelReason(enum.StrEnum):
    """Why `ctx.cancelled` was set (`ctx.cancel_reason`), and why a `JobCancelled` was raised
    (its `reason`). Here with the exception that carries it; `tenure.types` names it too."""

    LEASE_LOST = "lease_lost"
    CANCELLED = "cancelled"
    STAGE_TIMEOUT = "stage_timeout"
    MAX_LEASE_LIFETIME = "max_lease_lifetime"
    LEASE_UNCONFIRMED = "lease_unconfirmed"
    OWNERSHIP_UNKNOWN = "ownership_unknown"
    SHUTDOWN = "shutdown"
    JOB_MISSING = "job_missing"
    """The held job is gone from the database (a failover or restore lost its row)."""


class JobCancelled(BaseException):
    """The running job was cancelled, lost its lease or timed out.

    A `BaseException`, so that a tool's `except Exception` cannot swallow it. `reason` says
    which (a `CancelReason`: lease_lost, ownership_unknown, stage_timeout, max_lease_lifetime,
    shutdown, ...); None, the default, is `CancelReason.CANCELLED`.
    """

    def __init__(self, reason: CancelReason | None = None) -> None:
        self.reason: CancelReason = CancelReason.CANCELLED if reason is None else reason
        super().__init__(str(self.reason))


# The errors the HTTP API answers with their own code, the most specific first: the service
# answers the first an exception is an instance of, and the client raises the class again.
SERVED: tuple[type[TenureError], ...] = (
    PrincipalNotAllowed,
    PayloadTooLarge,
    InvalidArgument,
    JobNotFound,
    IdempotencyConflict,
    TerminalJob,
    InvalidTransition,
    SignalConflict,
    CommitUnconfirmed,
    StoreUnavailable,
)


def served_as(exc: TenureError) -> type[TenureError] | None:
    """The class of `SERVED` an error is answered as (None: an internal error)."""
    return next((kind for kind in SERVED if isinstance(exc, kind)), None)


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The one JSON shape of an error answer, the service's and the fence middleware's:
    `{"error": {"code", "message", ...}}`."""
    return {"error": {"code": code, "message": message, **extra}}
