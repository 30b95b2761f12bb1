"""The exception tree of tenure. Imports nothing from tenure."""

from __future__ import annotations

from typing import Any, ClassVar


class TenureError(Exception):
    """Base of every error tenure raises on purpose (except `JobCancelled`).

    `error_code` names the class on the wire (the HTTP API's `error.code`, the client's way
    back to the class); `http_status` is the status the service answers it with (500: a
    failure the API does not expose, answered `internal_error`).
    """

    error_code: ClassVar[str] = "tenure_error"
    http_status: ClassVar[int] = 500


class InvalidArgument(TenureError, ValueError):
    """Bad input to a tenure call; nothing was written."""

    error_code: ClassVar[str] = "invalid_argument"
    http_status: ClassVar[int] = 422


class PayloadTooLarge(InvalidArgument):
    """A payload, result, checkpoint or error document exceeds the configured size limit."""

    error_code: ClassVar[str] = "payload_too_large"
    http_status: ClassVar[int] = 413


class UnsupportedDatabase(InvalidArgument):
    """The database URL names a scheme tenure does not know."""

    error_code: ClassVar[str] = "unsupported_database"


class Unavailable(TenureError):
    """Something tenure depends on did not answer: the database, or the service a client
    calls. Retry later."""

    error_code: ClassVar[str] = "unavailable"


class StoreUnavailable(Unavailable):
    """The database could not be reached or did not answer in time."""

    error_code: ClassVar[str] = "database_unavailable"
    http_status: ClassVar[int] = 503


class StoreRejected(TenureError):
    """The database refused a statement for a reason that retrying cannot fix. Not an outage:
    the database answered, so a lease write that meets it has not lost track of ownership."""

    error_code: ClassVar[str] = "store_rejected"


class StoreConflict(StoreRejected):
    """A statement would break a constraint of the schema (a conflict with what is stored)."""

    error_code: ClassVar[str] = "store_conflict"


class StoreBug(StoreRejected):
    """The database could not run a statement as written (a bug in tenure, or a schema that
    was changed by hand): report it, with the message."""

    error_code: ClassVar[str] = "store_bug"


class ServiceUnavailable(Unavailable):
    """`tenure.Client`: the service did not answer (refused, reset, timed out) or answered that
    its database is away (503)."""

    error_code: ClassVar[str] = "service_unavailable"


class OwnershipUnknown(StoreUnavailable):
    """A lease operation could not reach the database: the worker may or may not still own the job.

    Start no new irreversible step; keep trying to confirm the lease while time remains.
    """

    error_code: ClassVar[str] = "ownership_unknown"


class LeaseLost(TenureError):
    """A conditional write found no row: this worker no longer owns the job. Publish nothing."""

    error_code: ClassVar[str] = "lease_lost"


class ToolOutcomeUnknown(TenureError):
    """A tool call timed out: its effect may or may not have happened. Retry with the same key."""

    error_code: ClassVar[str] = "tool_outcome_unknown"


class IdempotencyConflict(TenureError):
    """An idempotency key was reused by the tenant with a different kind or payload."""

    error_code: ClassVar[str] = "idempotency_conflict"
    http_status: ClassVar[int] = 409


class JobNotFound(TenureError, LookupError):
    """No job has that id (or the id is malformed)."""

    error_code: ClassVar[str] = "not_found"
    http_status: ClassVar[int] = 404


class TenantExists(TenureError):
    """`create_tenant` for a name already taken (issue another key with `issue_key`)."""

    error_code: ClassVar[str] = "tenant_exists"


class TenantNotFound(TenureError, LookupError):
    """No tenant has that name."""

    error_code: ClassVar[str] = "tenant_not_found"


class InvalidJobClass(TenureError):
    """A job class was declared with unsafe or impossible lease arithmetic."""

    error_code: ClassVar[str] = "invalid_job_class"


class NonRetryable(TenureError):
    """Raised by a handler for an error that retrying cannot fix (validation, permission).

    `code` becomes the failed job's error code; the message, written by the developer for the
    operator, is kept in the job's `error` (its first `MAX_MESSAGE` characters) unless the app
    was made with `keep_error_messages=False`. Logs and events carry the code only.
    """

    error_code: ClassVar[str] = "non_retryable"

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


class StageMismatch(NonRetryable):
    """A replayed handler asked for a different step or effect than the one recorded there."""

    error_code: ClassVar[str] = "stage_mismatch"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="stage_mismatch")


class AccessDenied(TenureError):
    """The service refused the API key (401) or the key's tenant may not do this (403)."""

    error_code: ClassVar[str] = "access_denied"


class JobFailed(TenureError):
    """`Client.result`: the job ended failed or cancelled (`job` holds its state and error)."""

    error_code: ClassVar[str] = "job_failed"

    def __init__(self, job: Any) -> None:
        super().__init__(f"job {job.id} ended {job.state.value}: {job.error}")
        self.job = job


class SignalConflict(TenureError):
    """A signal of that name was already stored for the job with a different payload."""

    error_code: ClassVar[str] = "signal_conflict"
    http_status: ClassVar[int] = 409


class WaitTimeout(NonRetryable):
    """A wait (`ctx.wait_for`, `ctx.wait_job`) reached its timeout before its condition held.
    Raised in the resumed handler; uncaught, it fails the job (the outcome is recorded, so a
    retry would only meet it again)."""

    error_code: ClassVar[str] = "wait_timeout"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="wait_timeout")


class ChildFailed(NonRetryable):
    """A child job awaited by `ctx.wait_job` ended failed or cancelled."""

    error_code: ClassVar[str] = "child_failed"

    def __init__(self, child_id: str, state: str, error: Any) -> None:
        super().__init__(f"child job {child_id} ended {state}", code="child_failed")
        self.child_id = child_id
        self.state = state
        self.error = error


class InvalidTransition(TenureError):
    """The job's state does not allow the requested operation."""

    error_code: ClassVar[str] = "invalid_transition"
    http_status: ClassVar[int] = 409


class TerminalJob(InvalidTransition):
    """The job is already succeeded, failed or cancelled."""

    error_code: ClassVar[str] = "terminal_job"
    http_status: ClassVar[int] = 409


class StaleFence(TenureError):
    """A receiver refused a command whose fencing token is below the highest it accepted."""

    error_code: ClassVar[str] = "stale_fence"
    http_status: ClassVar[int] = 409


class ResumeRefused(TenureError):
    """A resume check refused to continue a job from its checkpoint."""

    error_code: ClassVar[str] = "resume_refused"

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class JobCancelled(BaseException):
    """The running job was cancelled, lost its lease or timed out.

    A `BaseException`, so that a tool's `except Exception` cannot swallow it. `reason` says
    which: lease_lost, ownership_unknown, stage_timeout, max_lease_lifetime or shutdown.
    """

    def __init__(self, reason: str = "cancelled") -> None:
        super().__init__(reason)
        self.reason = reason


# The errors the HTTP API answers with their own code, the most specific first: the service
# answers the first an exception is an instance of, and the client raises the class again.
SERVED: tuple[type[TenureError], ...] = (
    PayloadTooLarge,
    InvalidArgument,
    JobNotFound,
    IdempotencyConflict,
    TerminalJob,
    InvalidTransition,
    SignalConflict,
    StoreUnavailable,
)


def served_as(exc: TenureError) -> type[TenureError] | None:
    """The class of `SERVED` an error is answered as (None: an internal error)."""
    return next((kind for kind in SERVED if isinstance(exc, kind)), None)


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The one JSON shape of an error answer, the service's and the fence middleware's:
    `{"error": {"code", "message", ...}}`."""
    return {"error": {"code": code, "message": message, **extra}}
