"""GET /v1/rollouts: the canaries a key may see, each compared with stable (the dashboard's
rollouts view). Reading is safe: the breaker is judged by submits and `tenure rollout status`,
never by this route."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request

from tenure.ledger import Principal, RolloutStatus
from tenure.service.auth import Caller, ledger_of
from tenure.service.errors import documented
from tenure.service.models import RolloutList, RolloutOut, VariantFiguresOut

router = APIRouter(prefix="/v1", tags=["rollouts"])


@router.get("/rollouts", response_model=RolloutList, responses=documented(401, 422, 503))
def list_rollouts(request: Request, caller: Caller) -> RolloutList:
    """Every rollout for the admin key; for a tenant key, those that reach its jobs, compared
    over its own jobs."""
    statuses = ledger_of(request).operations.rollout_statuses(caller.tenant)
    return RolloutList(rollouts=[_out(status, caller) for status in statuses])


def _out(status: RolloutStatus, caller: Principal) -> RolloutOut:
    rollout = asdict(status.rollout)
    if caller.tenant is not None and rollout["tenants"] is not None:
        rollout["tenants"] = [caller.tenant]  # a tenant is not told who else is in the canary
    return RolloutOut(
        **rollout,
        candidate=_figures(status, "candidate"),
        stable=_figures(status, "stable"),
        cost_ratio=status.cost_ratio,
    )


def _figures(status: RolloutStatus, side: str) -> VariantFiguresOut:
    figures = getattr(status, side)
    return VariantFiguresOut(**asdict(figures), failure_rate=figures.failure_rate)
