"""The public Ledger: validated, logged operations over a Store, one module per aggregate.

- `core`: the store, settings, lifecycle, and `ownership_unknown` events held back in an outage;
- `submission`: submit, submit_or_find, submit_many;
- `leases`: the lease protocol (claim, extend, stages, complete, fail, release);
- `reading`: get, list, events, stages, wait, figures; cancel and requeue;
- `limits`: per-tenant concurrency limits; `tenants`: tenants and API keys;
- `retention`: purge;
- `evidence`: references a lease records, and the retrieval cache;
- `waits`: signals, children, and the wait that settles or suspends a job.
"""

from __future__ import annotations

from tenure.ledger.awaiting import await_end
from tenure.ledger.core import DEFAULT_MAX_ATTEMPTS, backoff_delay
from tenure.ledger.evidence import EvidenceRecords
from tenure.ledger.leases import pinned_variants
from tenure.ledger.reading import MAX_LIST_LIMIT, Reading
from tenure.ledger.retention import DEFAULT_KEY_RETENTION, Retention
from tenure.ledger.rollouts import RolloutStatus, VariantFigures, p95, share_of
from tenure.ledger.submission import MAX_BATCH, Submission
from tenure.ledger.tenants import Principal, Tenants
from tenure.ledger.waits import Waits
from tenure.storage import open_store
from tenure.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_seconds

__all__ = [
    "DEFAULT_KEY_RETENTION",
    "DEFAULT_MAX_ATTEMPTS",
    "MAX_BATCH",
    "MAX_LIST_LIMIT",
    "Ledger",
    "Principal",
    "RolloutStatus",
    "VariantFigures",
    "await_end",
    "backoff_delay",
    "connect",
    "p95",
    "pinned_variants",
    "share_of",
]


class Ledger(Waits, Submission, EvidenceRecords, Reading, Tenants, Retention):
    """Durable, leased, fenced jobs. Create one with `tenure.connect(url)`.

    Every write that acts for a lease is conditional on the lease still being held by the
    database's clock; zero rows raise `LeaseLost` and are recorded as `result_rejected` (or
    `heartbeat_lost`). A database that cannot be reached during a lease operation raises
    `OwnershipUnknown`.
    """


def connect(
    url: str,
    *,
    migrate: bool = True,
    timeout: float = 5.0,
    pool_size: int = 4,
    listen_url: str | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff_base: float = 1.0,
    backoff_cap: float = 300.0,
) -> Ledger:
    """Open the ledger at `url` (`sqlite:///file.db` or `postgresql://…`) and migrate it.

    `timeout` bounds connecting and each statement (seconds); a lease operation that exceeds
    it raises `OwnershipUnknown`. `listen_url` names a direct PostgreSQL connection for LISTEN
    when `url` goes through a transaction pooler (default: `$TENURE_LISTEN_URL`; without
    either, workers and waiters poll there).
    """
    ledger = Ledger(
        open_store(
            url,
            timeout=check_seconds(timeout, "timeout"),
            pool_size=pool_size,
            listen_url=listen_url,
        ),
        max_payload_bytes=max_payload_bytes,
        default_max_attempts=default_max_attempts,
        backoff_base=backoff_base,
        backoff_cap=backoff_cap,
    )
    if migrate:
        try:
            ledger.migrate()
        except BaseException:
            ledger.close()
            raise
    return ledger
