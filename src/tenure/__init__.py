"""tenure: leased, fenced, durable jobs for long side-effecting work."""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from tenure.errors import (
    IdempotencyConflict,
    InvalidArgument,
    InvalidJobClass,
    InvalidTransition,
    JobCancelled,
    JobNotFound,
    LeaseLost,
    NonRetryable,
    OwnershipUnknown,
    PayloadTooLarge,
    ResumeRefused,
    StaleFence,
    StoreUnavailable,
    TenureError,
    TerminalJob,
    ToolOutcomeUnknown,
    UnsupportedDatabase,
)
from tenure.ledger import Ledger, connect
from tenure.types import Event, ExtendResult, Job, JobState, Lease

# A library stays silent unless the application configures logging for "tenure".
logging.getLogger("tenure").addHandler(logging.NullHandler())

try:
    __version__ = version("tenure")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "Event",
    "ExtendResult",
    "IdempotencyConflict",
    "InvalidArgument",
    "InvalidJobClass",
    "InvalidTransition",
    "Job",
    "JobCancelled",
    "JobNotFound",
    "JobState",
    "Lease",
    "LeaseLost",
    "Ledger",
    "NonRetryable",
    "OwnershipUnknown",
    "PayloadTooLarge",
    "ResumeRefused",
    "StaleFence",
    "StoreUnavailable",
    "TenureError",
    "TerminalJob",
    "ToolOutcomeUnknown",
    "UnsupportedDatabase",
    "__version__",
    "connect",
]
