"""Retention: deleting old terminal jobs in bounded batches, safe while workers run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from datetime import timedelta
from typing import Protocol

from tenure.errors import InvalidArgument
from tenure.ledger.core import Part
from tenure.ledger.submission import MAX_BATCH
from tenure.logs import emit
from tenure.storage.base import PurgeStep, RetentionStore
from tenure.storage.evidence import EvidenceStore
from tenure.types import PurgeReport
from tenure.validation import check_int, check_number

log = logging.getLogger("tenure")

# A purged job with an idempotency key is kept at least this long (seconds): a repeated
# submit within the window still finds it.
DEFAULT_KEY_RETENTION = 7 * 86400.0


MAX_AGE_SECONDS = 1e10  # some 300 years: a purge of nothing, within PostgreSQL's dates


def _seconds_of(value: timedelta | float, what: str) -> float:
    """A non-negative age in seconds, from seconds or a timedelta."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"{what} must be seconds or a timedelta, got {value!r}")
    return check_number(seconds, f"{what} (seconds)", 0, MAX_AGE_SECONDS)


class RetentionParts(RetentionStore, EvidenceStore, Protocol):
    """What `Retention` uses of the store: the purge of ended jobs and stale retrievals."""


class Retention(Part[RetentionParts]):
    """`purge`."""

    def purge(
        self,
        older_than: timedelta | float,
        *,
        keep_keys: timedelta | float = DEFAULT_KEY_RETENTION,
        batch_size: int = 1000,
        on_batch: Callable[[PurgeReport], None] | None = None,
        dry_run: bool = False,
    ) -> PurgeReport:
        """Delete terminal jobs last changed more than `older_than` ago (by the database's
        clock), with their events, stages, effects and evidence, and the cached retrieval
        results that expired or are older than `older_than`.

        Bounded batches (`batch_size` jobs looked at per transaction, in submission order), so
        it is safe while workers run: only jobs that are terminal when their batch runs go. A
        job with an idempotency key is kept until it is also older than `keep_keys`, so a
        repeated submit within that window still finds it. `on_batch` gets the running totals.
        With `dry_run`, nothing is deleted: the report counts the jobs that would go now (and
        those kept for their keys), with no batches.
        """
        age = _seconds_of(older_than, "older_than")
        key_age = _seconds_of(keep_keys, "keep_keys")
        scan = check_int(batch_size, "batch size", 1, MAX_BATCH)
        if dry_run:
            jobs, kept = self.store.purge_preview(age, key_age)
            return PurgeReport(jobs=jobs, kept_for_keys=kept)
        report = PurgeReport()
        after = 0
        while True:
            batch = self.store.purge_batch(PurgeStep(after, scan, age, key_age))
            report.batches += 1
            report.jobs += batch.jobs
            report.stages += batch.stages
            report.effects += batch.effects
            report.events += batch.events
            report.kept_for_keys += batch.kept_for_keys
            if on_batch is not None:
                on_batch(report)
            if batch.scanned < scan or batch.reached_new:
                break
            after = batch.last_seq
        report.retrievals = self.store.purge_retrievals(age)
        emit(log, logging.INFO, "purged", **asdict(report))
        return report
