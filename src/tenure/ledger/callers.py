"""What a caller of the service (a key) may submit and read, for the HTTP API and MCP alike."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tenure.errors import IdempotencyConflict
from tenure.ledger.tenants import Principal
from tenure.options import SubmitOptions
from tenure.types import JSON, Job

if TYPE_CHECKING:
    from tenure.ledger.face import Ledger

_TAKEN = (
    "the idempotency key already belongs to another job: use a new key for new work "
    "(nothing was written)"
)


def submit_as(
    ledger: Ledger, caller: Principal, kind: str, payload: JSON, options: SubmitOptions
) -> tuple[str, bool]:
    """`Ledger.submit_or_find` for a caller: in its tenant (checked by the door), acting for
    the principal its key allows (PrincipalNotAllowed before anything is written). A bound key
    whose idempotency key finds a job it may not read learns nothing of that job: not its id,
    not its state (IdempotencyConflict without the id)."""
    options = replace(options, principal=caller.acting_for(options.principal))
    try:
        job_id, created = ledger.submit_or_find(kind, payload, options)
    except IdempotencyConflict:
        if caller.binding is None:
            raise
        raise IdempotencyConflict(_TAKEN) from None
    # Only a bound key can find a job it may not read (the key is the tenant's own).
    if not created and caller.binding is not None and not caller.may_read(ledger.get(job_id)):
        raise IdempotencyConflict(_TAKEN)
    return job_id, created


def readable(caller: Principal, job: Job | None) -> Job | None:
    """The job if the caller may read it (its tenant, and its bound principal), else None."""
    return job if job is not None and caller.may_read(job) else None
