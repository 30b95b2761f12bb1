"""GET /v1/schedules: the kinds the workers fire by schedule (admin key: schedules are the
fleet's, not a tenant's)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from tenure.service.auth import Caller, ledger_of
from tenure.service.errors import ApiError, documented
from tenure.service.models import ScheduleList, ScheduleOut

router = APIRouter(prefix="/v1", tags=["schedules"])


@router.get("/schedules", response_model=ScheduleList, responses=documented(401, 403, 503))
def list_schedules(request: Request, caller: Caller) -> ScheduleList:
    """Each schedule a worker declared, with its next and last slot and what it fired and
    missed."""
    if not caller.admin:
        raise ApiError(403, "forbidden", "schedules are the fleet's: the admin key lists them")
    rows = ledger_of(request).operations.schedules.list()
    return ScheduleList(
        schedules=[
            ScheduleOut(
                kind=row.kind,
                description=row.description,
                paused=row.paused,
                next_slot=row.next_slot,
                last_slot=row.last_slot,
                last_fired_at=row.last_fired_at,
                fired=row.fired,
                missed=row.missed,
            )
            for row in rows
        ]
    )
