"""Fencing tokens in tests: the database clock in microseconds is their floor (invariant 16)."""

from __future__ import annotations

from datetime import UTC, datetime

import tenure


def micros(moment: datetime) -> int:
    """`moment` in whole microseconds since 1970 (UTC): the token floor at that moment."""
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def claimed(ledger: tenure.Ledger, job_id: str) -> list[int]:
    """The tokens of the job's claims, in order (each one above the one before)."""
    tokens = [e.token for e in ledger.events(job_id) if e.type == "job_claimed"]
    assert all(t is not None for t in tokens)
    return [t for t in tokens if t is not None]
