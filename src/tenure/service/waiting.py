"""The cap on concurrent long-polls (`GET /v1/jobs/{id}?wait=S`) per tenant: a waiter costs no
statement, but each holds a socket, a task and a place in the ledger's watch list, so that one
tenant's key must not be able to open them without bound. Past the cap: 429 with Retry-After."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from tenure.service.errors import ApiError

# The admin key is one caller of its own for the cap.
_ADMIN = "\0admin"


class LongPolls:
    """Counts the long-polls open per tenant (on the event loop's thread: no lock)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._open: Counter[str] = Counter()

    @contextmanager
    def held(self, tenant: str | None, retry_after: float) -> Iterator[None]:
        """One long-poll of `tenant` (None: the admin key) for the block, or ApiError 429."""
        who = _ADMIN if tenant is None else tenant
        if self._open[who] >= self.cap:
            raise ApiError(
                429,
                "too_many_waits",
                f"this tenant already holds {self.cap} waiting requests (the server's "
                "--max-waits-per-tenant); retry later or wait without ?wait",
                headers={"Retry-After": str(max(1, round(retry_after)))},
            )
        self._open[who] += 1
        try:
            yield
        finally:
            self._open[who] -= 1
            if not self._open[who]:
                del self._open[who]

    def total(self) -> int:
        """Long-polls open now, all tenants."""
        return sum(self._open.values())
