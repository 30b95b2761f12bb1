"""The /v1 routes: submit, read, wait for, signal, cancel and requeue jobs, tenant by tenant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from tenure.clock import Clock
from tenure.errors import JobNotFound
from tenure.ledger import MAX_LIST_LIMIT, Ledger, Principal, await_end
from tenure.ledger.callers import readable, submit_as
from tenure.service.auth import Caller, ledger_of, settings_of
from tenure.service.errors import ApiError, documented
from tenure.service.models import (
    EventList,
    EventOut,
    EvidenceList,
    EvidenceOut,
    JobOut,
    JobPage,
    JobRef,
    SignalOut,
    StageList,
    StageOut,
    SubmitRequest,
)
from tenure.service.waiting import LongPolls
from tenure.types import Job, JobState
from tenure.validation import MAX_NAME_LENGTH, check_job_id

router = APIRouter(prefix="/v1", tags=["jobs"])
_AUTH = (401, 422, 503)


def visible_job(ledger: Ledger, caller: Principal, job_id: str) -> Job:
    """The job if the caller may read it; another tenant's job, or another principal's for a
    bound key, is as unknown as a missing one."""
    try:
        job = ledger.get(job_id)
    except JobNotFound:
        job = None
    found = readable(caller, job)
    if found is None:
        raise ApiError(404, "not_found", f"no job has the id {job_id}")
    return found


@router.post(
    "/jobs",
    status_code=202,
    response_model=JobRef,
    responses=documented(*_AUTH, 400, 403, 409, 413, 415)
    | {200: {"model": JobRef, "description": "the key's existing job"}},
)
def submit(
    body: SubmitRequest,
    request: Request,
    response: Response,
    caller: Caller,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=MAX_NAME_LENGTH)] = None,
    traceparent: Annotated[
        str | None,
        Header(max_length=55, description="W3C trace context: the job's attempts join it"),
    ] = None,
) -> JobRef:
    """Persist a job and answer at once (202); a repeated key answers 200 with its job."""
    ledger = ledger_of(request)
    if body.idempotency_key and idempotency_key and body.idempotency_key != idempotency_key:
        raise ApiError(422, "invalid_request", "the Idempotency-Key header and body field differ")
    tenant = body.tenant or caller.submits_as
    if not caller.may_see(tenant):
        raise ApiError(403, "forbidden", "a tenant key submits to its own tenant only")
    options = body.options(
        tenant=tenant,
        idempotency_key=body.idempotency_key or idempotency_key,
        traceparent=traceparent,
    )
    job_id, created = submit_as(ledger, caller, body.kind, body.payload, options)
    response.headers["Location"] = f"/v1/jobs/{job_id}"
    if created:
        return JobRef(id=job_id, state=JobState.QUEUED)
    response.status_code = 200
    return JobRef(id=job_id, state=ledger.get(job_id).state)


@router.get("/jobs", response_model=JobPage, responses=documented(*_AUTH, 403, 404))
def list_jobs(
    request: Request,
    caller: Caller,
    state: JobState | None = None,
    kind: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME_LENGTH)] = None,
    tenant: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME_LENGTH)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 50,
    after: Annotated[str | None, Query(description="the `next` of the previous page")] = None,
) -> JobPage:
    """Jobs newest first, filtered by state and kind (and tenant, for the admin key)."""
    ledger = ledger_of(request)
    if tenant is not None and not caller.may_see(tenant):
        raise ApiError(403, "forbidden", "a tenant key lists its own tenant only")
    if after is not None:
        after = visible_job(ledger, caller, after).id
    bound = caller.binding
    jobs = ledger.list(
        state=state,
        kind=kind,
        tenant=caller.tenant or tenant,
        limit=limit,
        after=after,
        principal=None if bound is None else bound.value,
    )
    following = jobs[-1].id if len(jobs) == limit else None
    return JobPage(jobs=[JobOut.model_validate(j) for j in jobs], next=following, now=ledger.now())


@router.get("/jobs/{job_id}", response_model=JobOut, responses=documented(*_AUTH, 404, 429))
async def get_job(
    job_id: str,
    request: Request,
    caller: Caller,
    wait: Annotated[
        float,
        Query(ge=0, description="seconds to wait for a terminal state (capped by the server)"),
    ] = 0.0,
) -> JobOut:
    """The job; with `wait`, answers as soon as it is terminal or when the wait is over. A
    waiting request costs no database statement while it waits; a tenant may hold
    `--max-waits-per-tenant` of them at once (past that, 429 with Retry-After)."""
    ledger = ledger_of(request)
    clock: Clock = request.app.state.clock  # create_app's (a test's FakeClock, or the system's)
    deadline = clock.monotonic() + min(wait, settings_of(request).max_wait_seconds)
    if wait <= 0:
        return JobOut.model_validate(await run_in_threadpool(visible_job, ledger, caller, job_id))
    try:
        job_id = check_job_id(job_id)
    except JobNotFound:
        raise ApiError(404, "not_found", f"no job has the id {job_id}") from None

    async def read() -> Job:
        return await run_in_threadpool(visible_job, ledger, caller, job_id)

    long_polls: LongPolls = request.app.state.long_polls
    remaining = deadline - clock.monotonic()
    # The watch starts before the first read (inside await_end): an end between them is
    # not missed. The first read answers 404 and a job that has already ended.
    with long_polls.held(caller.tenant, retry_after=remaining):
        ended = await await_end(ledger, job_id, read, remaining, stop=request.is_disconnected)
    return JobOut.model_validate(ended)


@router.get("/jobs/{job_id}/events", response_model=EventList, responses=documented(*_AUTH, 404))
def job_events(job_id: str, request: Request, caller: Caller) -> EventList:
    """The job's flight recorder, oldest first."""
    ledger = ledger_of(request)
    job = visible_job(ledger, caller, job_id)
    return EventList(events=[EventOut.model_validate(e) for e in ledger.events(job.id)])


@router.get(
    "/jobs/{job_id}/evidence", response_model=EvidenceList, responses=documented(*_AUTH, 404)
)
def job_evidence(job_id: str, request: Request, caller: Caller) -> EvidenceList:
    """The references the job recorded (documents, code results, media), in order."""
    ledger = ledger_of(request)
    job = visible_job(ledger, caller, job_id)
    found = ledger.evidence(job.id)
    return EvidenceList(evidence=[EvidenceOut.model_validate(e.to_dict()) for e in found])


@router.get("/jobs/{job_id}/stages", response_model=StageList, responses=documented(*_AUTH, 404))
def job_stages(job_id: str, request: Request, caller: Caller) -> StageList:
    """The job's recorded steps and effects, in handler order."""
    ledger = ledger_of(request)
    job = visible_job(ledger, caller, job_id)
    return StageList(stages=[StageOut.model_validate(s) for s in ledger.stages(job.id)])


@router.post("/jobs/{job_id}/cancel", response_model=JobRef, responses=documented(*_AUTH, 404, 409))
def cancel(job_id: str, request: Request, caller: Caller) -> JobRef:
    """Cancel a queued or running job (its token is bumped: no running worker can publish)."""
    return _moved(request, caller, job_id, Ledger.cancel, JobState.CANCELLED)


@router.post(
    "/jobs/{job_id}/requeue", response_model=JobRef, responses=documented(*_AUTH, 404, 409)
)
def requeue(job_id: str, request: Request, caller: Caller) -> JobRef:
    """Make a failed or cancelled job claimable again from its saved step."""
    return _moved(request, caller, job_id, Ledger.requeue, JobState.QUEUED)


def _moved(
    request: Request,
    caller: Principal,
    job_id: str,
    move: Callable[[Ledger, str], object],
    state: JobState,
) -> JobRef:
    """An operator's transition of a job the caller may see; the job is then in `state`."""
    ledger = ledger_of(request)
    job = visible_job(ledger, caller, job_id)
    move(ledger, job.id)
    return JobRef(id=job.id, state=state)


@router.post(
    "/jobs/{job_id}/signals/{name}",
    response_model=SignalOut,
    responses=documented(*_AUTH, 404, 409, 413, 415),
)
def signal(
    job_id: str,
    name: Annotated[str, Path(min_length=1, max_length=MAX_NAME_LENGTH)],
    request: Request,
    caller: Caller,
    payload: Annotated[Any, Body(description="the signal's payload (any JSON)")] = None,
) -> SignalOut:
    """Send the job a signal (an approval, an answer), stored once per job and name: a repeat
    with the same payload is answered as the first (`stored` false), a different payload is a
    409, and so is a job that has ended."""
    ledger = ledger_of(request)
    job = visible_job(ledger, caller, job_id)
    stored = ledger.signal(job.id, name, payload)
    return SignalOut(id=job.id, signal=name, stored=stored, state=ledger.get(job.id).state)
