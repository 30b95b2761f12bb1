"""tenure: leased, fenced, durable jobs for long side-effecting work."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

# The submodules the README names after `import tenure` (`tenure.fence.headers(fx)`,
# `tenure.replay.replay(...)`): both are plain Python, no extra needed.
from tenure import checks, fence, replay
from tenure._version import __version__
from tenure.app import App, JobClass
from tenure.asking import Ask
from tenure.budgets import Budget, BudgetExhausted
from tenure.errors import (
    AccessDenied,
    ChildFailed,
    CommitUnconfirmed,
    FenceConflict,
    IdempotencyConflict,
    InvalidArgument,
    InvalidJobClass,
    InvalidTransition,
    JobCancelled,
    JobFailed,
    JobNotFound,
    LeaseLost,
    NonRetryable,
    OwnershipUnknown,
    PayloadTooLarge,
    PrincipalNotAllowed,
    ResumeRefused,
    ServiceUnavailable,
    SignalConflict,
    StageMismatch,
    StaleFence,
    StoreBug,
    StoreConflict,
    StoreRejected,
    StoreUnavailable,
    TenantExists,
    TenantNotFound,
    TenureError,
    TerminalJob,
    ToolOutcomeUnknown,
    Unavailable,
    UnsupportedDatabase,
    WaitTimeout,
)
from tenure.evidence import Allowed, CodeResult, DocumentRef, Evidence, MediaRef
from tenure.ledger import Ledger, Operations, connect
from tenure.options import SubmitOptions
from tenure.rates import Rate, RateLimited
from tenure.retrieval import Retriever
from tenure.runtime.context import JobContext
from tenure.runtime.worker import Worker
from tenure.schedules import Every
from tenure.types import (
    TERMINAL_STATES,
    CancelReason,
    Effect,
    Event,
    EventType,
    ExtendResult,
    Job,
    JobState,
    Lease,
    PurgeReport,
    Stage,
    StageKind,
    StageStatus,
)
from tenure.wait_state import WaitFor, WaitState

# A library stays silent unless the application configures logging for "tenure".
logging.getLogger("tenure").addHandler(logging.NullHandler())

__all__ = [
    "TERMINAL_STATES",
    "AccessDenied",
    "Allowed",
    "App",
    "Ask",
    "AsyncClient",
    "Budget",
    "BudgetExhausted",
    "CancelReason",
    "ChildFailed",
    "Client",
    "CodeResult",
    "CommitUnconfirmed",
    "DocumentRef",
    "Effect",
    "Event",
    "EventType",
    "Every",
    "Evidence",
    "ExtendResult",
    "FenceConflict",
    "IdempotencyConflict",
    "InvalidArgument",
    "InvalidJobClass",
    "InvalidTransition",
    "Job",
    "JobCancelled",
    "JobClass",
    "JobContext",
    "JobFailed",
    "JobNotFound",
    "JobState",
    "Lease",
    "LeaseLost",
    "Ledger",
    "MediaRef",
    "NonRetryable",
    "Operations",
    "OwnershipUnknown",
    "PayloadTooLarge",
    "PrincipalNotAllowed",
    "PurgeReport",
    "Rate",
    "RateLimited",
    "ResumeRefused",
    "Retriever",
    "ServiceUnavailable",
    "SignalConflict",
    "Stage",
    "StageKind",
    "StageMismatch",
    "StageStatus",
    "StaleFence",
    "StoreBug",
    "StoreConflict",
    "StoreRejected",
    "StoreUnavailable",
    "SubmitOptions",
    "TenantExists",
    "TenantNotFound",
    "TenureError",
    "TerminalJob",
    "ToolOutcomeUnknown",
    "Unavailable",
    "UnsupportedDatabase",
    "WaitFor",
    "WaitState",
    "WaitTimeout",
    "Worker",
    "__version__",
    "checks",
    "connect",
    "fence",
    "replay",
]


if TYPE_CHECKING:  # the names `__getattr__` below makes on first use, for type checkers
    from tenure.client import AsyncClient, Client


def __getattr__(name: str) -> object:
    """`tenure.Client` and `tenure.AsyncClient` import httpx (the `client` extra) on first use."""
    if name in {"Client", "AsyncClient"}:
        from tenure import client

        return getattr(client, name)
    raise AttributeError(f"module 'tenure' has no attribute {name!r}")
