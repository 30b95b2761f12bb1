"""The demo's bank: a receiver on loopback that guards every command with a FenceGuard."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import StaleFence
from tenure.fence import FenceGuard
from tenure.testing.fenced import FencedCommand, FencedServer, refusal


@dataclass
class BankEvent:
    """Something the bank did, for the demo's timeline."""

    at: float
    what: str  # applied | refused | replayed
    path: str
    token: int
    key: str
    detail: str = ""


@dataclass
class Bank:
    """Payments behind a FenceGuard; `events` is what the timeline shows."""

    guard: FenceGuard
    payments: list[dict[str, Any]] = field(default_factory=list)
    events: list[BankEvent] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Clock = SYSTEM_CLOCK

    def handle(self, command: FencedCommand) -> tuple[int, Any]:
        """Charge (or reconcile) once per key under the command's fence."""
        path, scope, token, key = command.path, command.scope, command.token, command.key
        body = command.body

        def pay() -> dict[str, Any]:
            with self.lock:
                payment = {
                    "payment_id": f"pay-{len(self.payments) + 1}",
                    "amount_cents": body["amount_cents"],
                    "fence": token,
                }
                self.payments.append(payment)
            self.events.append(
                BankEvent(self.clock.wall(), "applied", path, token, key, payment["payment_id"])
            )
            return payment

        def reconcile() -> Any:
            earlier = self.guard.lookup(body["original_key"], scope)
            return earlier.result if earlier.ran else pay()

        run = reconcile if path.endswith("/reconcile") else pay
        try:
            result, replayed = self.guard.apply_with_status(
                scope, token, key, run, claim=command.claim
            )
        except StaleFence as exc:  # FenceConflict too: a second holder of the token
            self.events.append(BankEvent(self.clock.wall(), "refused", path, token, key, str(exc)))
            return refusal(command, exc)
        if replayed:
            self.events.append(BankEvent(self.clock.wall(), "replayed", path, token, key))
        return 201, result


class BankServer(FencedServer):
    """`Bank` over HTTP on 127.0.0.1 (a free port), on a background thread."""

    def __init__(self, bank: Bank) -> None:
        self.bank = bank
        super().__init__(bank.handle)
