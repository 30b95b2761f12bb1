"""The ledger's core: its store, settings, lifecycle, and the `ownership_unknown` events held
back while the database is away (written when it answers again)."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from datetime import datetime
from typing import Any, Generic, Self, TypeVar

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import StoreUnavailable, TenureError
from tenure.ledger.ended import EndedWatch
from tenure.logs import emit
from tenure.storage import Store
from tenure.types import CancelReason, EventType, Lease
from tenure.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_int, check_seconds

log = logging.getLogger("tenure")

DEFAULT_MAX_ATTEMPTS = 5


def event_detail(**fields: Any) -> str:
    """An event's detail as canonical JSON text (ids, sizes, hashes: never content)."""
    return json.dumps(fields, separators=(",", ":"), sort_keys=True, default=str)


class LedgerCore:
    """What every part of the `Ledger` shares. See `tenure.ledger.Ledger`."""

    def __init__(
        self,
        store: Store,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_base: float = 1.0,
        backoff_cap: float = 300.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.clock = clock
        self.max_payload_bytes = check_int(max_payload_bytes, "max_payload_bytes", 1)
        self.default_max_attempts = check_int(default_max_attempts, "default_max_attempts", 1)
        self.backoff_base = check_seconds(backoff_base, "backoff_base")
        self.backoff_cap = check_seconds(backoff_cap, "backoff_cap")
        self._unconfirmed: list[tuple[str, str, int, str]] = []
        self._unconfirmed_lock = threading.Lock()
        self.ended = EndedWatch(store)

    def migrate(self) -> list[int]:
        """Apply missing schema migrations (under a lock); return the versions applied now."""
        return self.store.migrate()

    def close(self) -> None:
        """Write any held-back events if the database answers, then release the connections."""
        with contextlib.suppress(TenureError):
            self.confirm_unconfirmed(attempts=1)
        self.ended.close()
        self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now(self) -> datetime:
        """The database's clock, the one arbiter of leases."""
        return self.store.now()

    def report_unconfirmed(self, lease: Lease, last_confirmed: datetime) -> None:
        """A worker's conservative deadline passed without the database confirming the lease:
        log `ownership_unknown` now, write it to the events when the database answers."""
        self.ownership_unknown(
            lease, CancelReason.LEASE_UNCONFIRMED, None, last_confirmed=last_confirmed
        )

    def ownership_unknown(
        self,
        lease: Lease,
        operation: str,
        exc: Exception | None,
        last_confirmed: datetime | None = None,
    ) -> None:
        request_id = uuid.uuid4().hex[:12]
        last = (last_confirmed or lease.lease_until).isoformat()
        error = "none" if exc is None else type(exc).__name__
        emit(
            log,
            logging.WARNING,
            "ownership_unknown",
            job=lease.job_id,
            token=lease.token,
            owner=lease.owner_id,
            last_confirmed_lease_until=last,
            request=request_id,
            operation=operation,
            error=error,
        )
        detail = event_detail(
            operation=operation,
            last_confirmed_lease_until=last,
            request_id=request_id,
            error=error,
        )
        with self._unconfirmed_lock:
            self._unconfirmed.append((lease.job_id, lease.owner_id, lease.token, detail))

    def confirm_unconfirmed(self, attempts: int = 3) -> None:
        """Write the `ownership_unknown` events held back while the database was away.

        Called right after the database answered, so a failure here is most likely a pooled
        connection the outage broke: try again a few times before keeping them for later.
        """
        if not self._unconfirmed:
            return
        with self._unconfirmed_lock:
            pending, self._unconfirmed = self._unconfirmed, []
        index = 0
        while index < len(pending):
            job_id, owner_id, token, detail = pending[index]
            try:
                self.store.record_event(
                    job_id, EventType.OWNERSHIP_UNKNOWN, token, owner_id, detail
                )
                index += 1
            except StoreUnavailable:
                attempts -= 1
                if attempts <= 0:
                    with self._unconfirmed_lock:
                        self._unconfirmed[:0] = pending[index:]
                    return


S = TypeVar("S")
"""The aggregates of the store a part reads and writes (a protocol of `tenure.storage`)."""


class Part(Generic[S]):
    """One part of the `Ledger`: the state it owns, over the core every part shares, typed
    against the aggregates of the store it uses (`S`), not the whole `Store`."""

    def __init__(self, core: LedgerCore, store: S) -> None:
        self.core = core
        self.store = store
