"""Runs that wait, in the store: how a wait is decided inside its transaction, and how a
waiting job's row records it (the types are the domain's, `tenure/waits.py`).

A wait runs in one transaction that first locks the job's row under its lease (`wait__lock`),
then reads what it waits for (a signal, child jobs) and the database's clock, and then either
records the outcome as a done stage (`wait__settle`) or suspends the job (`wait__suspend`):
state `waiting`, no owner, no lease, claimable again at `run_after`. A signal or a child's end
updates that same row, so it either commits before the lock (and the read sees it) or waits
for the suspend and then sets `run_after` to now (the claim finds the job at once).
"""

from __future__ import annotations

import enum
from datetime import datetime

# run_after of a wait without a deadline: never due by time (only a signal or a child wakes it).
NEVER = datetime.fromisoformat("9999-01-01T00:00:00+00:00")


class SignalOutcome(enum.StrEnum):
    """What storing a signal did."""

    STORED = "stored"  # the first of its name
    REPEATED = "repeated"  # the same payload again: answered as the first
    CONFLICT = "conflict"  # a different payload under a name already stored
    NO_JOB = "no_job"  # unknown or terminal
