"""The ledger: validated, logged operations over a Store, made of one part per aggregate, with
three faces.

- `Ledger` (face.py), the application's: submit, read, wait, cancel, signal, requeue, and the
  lease protocol by hand;
- `Operations` (operations.py, `ledger.operations`), the operator's: tenants and keys, limits,
  declarations, rollouts, purge, figures;
- `LedgerPort` (port.py, `lease_port(ledger)`), the worker runtime's (`tenure.port.LeasePort`).

The parts, each owning its state: `core` (the store, settings, clock, lifecycle, and
`ownership_unknown` events held back in an outage), `submission`, `leases`, `reading`,
`limits`, `tenants`, `rollouts`, `declarations`, `retention`, `evidence` and `waits`. Outside
this package nothing reaches the store or the ended-jobs watch (tests/unit/test_layers.py).
"""

from __future__ import annotations

from tenure.backoff import backoff_delay
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.ledger.awaiting import await_end
from tenure.ledger.core import DEFAULT_MAX_ATTEMPTS
from tenure.ledger.face import Ledger, lease_port
from tenure.ledger.leases import pinned_variants
from tenure.ledger.operations import Operations
from tenure.ledger.port import LedgerPort
from tenure.ledger.reading import MAX_LIST_LIMIT
from tenure.ledger.retention import DEFAULT_KEY_RETENTION
from tenure.ledger.rollouts import RolloutStatus, VariantFigures, p95, share_of
from tenure.ledger.submission import MAX_BATCH
from tenure.ledger.tenants import Principal
from tenure.storage import open_store
from tenure.storage.schedules import ScheduleRow
from tenure.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_seconds

__all__ = [
    "DEFAULT_KEY_RETENTION",
    "DEFAULT_MAX_ATTEMPTS",
    "MAX_BATCH",
    "MAX_LIST_LIMIT",
    "Ledger",
    "LedgerPort",
    "Operations",
    "Principal",
    "RolloutStatus",
    "ScheduleRow",
    "VariantFigures",
    "await_end",
    "backoff_delay",
    "connect",
    "lease_port",
    "p95",
    "pinned_variants",
    "share_of",
]


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
    clock: Clock = SYSTEM_CLOCK,
) -> Ledger:
    """Open the ledger at `url` (`sqlite:///file.db` or `postgresql://…`) and migrate it.

    `timeout` bounds connecting and each statement (seconds); a lease operation that exceeds
    it raises `OwnershipUnknown`. `listen_url` names a direct PostgreSQL connection for LISTEN
    when `url` goes through a transaction pooler (default: `$TENURE_LISTEN_URL`; without
    either, workers and waiters poll there). `clock` keeps the ledger's local deadlines
    (`wait`'s timeout, caches); the database's clock still decides every lease.
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
        clock=clock,
    )
    if migrate:
        try:
            ledger.migrate()
        except BaseException:
            ledger.close()
            raise
    return ledger
