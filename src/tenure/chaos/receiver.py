"""The receiver of a chaos run: payments and receipts behind a `FenceGuard` on a database of
its own (never failed over, never restored), over HTTP on loopback. It reads the fence headers
a worker sends (`tenure.fence.headers`, `X-Execution-Claim` included), answers a refusal the way
`FenceMiddleware` does (409 `stale_fence` or `fence_conflict`, with the receiver's highest
token), and records every command with the claim it came from, so that a token accepted from
two claims is counted outside the ledger's database."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import StaleFence
from tenure.fence import FenceGuard
from tenure.testing.fenced import FencedCommand, FencedServer, refusal


@dataclass(frozen=True, slots=True)
class Command:
    """One command the receiver decided on."""

    at: float
    what: str  # applied | replayed | refused | conflict
    scope: str
    token: int
    key: str
    claim: str | None


@dataclass
class Receiver:
    """Commands (payments, receipts) behind a guard; `commands` is what it did, in order."""

    guard: FenceGuard
    commands: list[Command] = field(default_factory=list)
    paid: int = 0
    clock: Clock = SYSTEM_CLOCK
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, command: FencedCommand) -> tuple[int, Any]:
        """Run a command once per key under its fence; the HTTP status and JSON answer."""
        scope, token, key, claim = command.scope, command.token, command.key, command.claim

        def pay() -> dict[str, Any]:
            with self._lock:
                self.paid += 1
                payment = {"payment_id": f"pay-{self.paid}", "fence": token, **command.body}
                self.commands.append(
                    Command(self.clock.wall(), "applied", scope, token, key, claim)
                )
            return payment

        try:
            result, replayed = self.guard.apply_with_status(scope, token, key, pay, claim=claim)
        except StaleFence as exc:  # FenceConflict too: each with its own code
            what = "refused" if exc.error_code == StaleFence.error_code else "conflict"
            self._record(what, scope, token, key, claim)
            return refusal(command, exc)
        if replayed:
            self._record("replayed", scope, token, key, claim)
        return 201, result if isinstance(result, dict) else {"result": result}

    def accepted_twice(self) -> int:
        """Tokens (per scope) whose commands ran for more than one claim: two holders of one
        token both acted. A command sent without a claim names no holder and is not counted
        (`count("unclaimed")` says how many ran so)."""
        holders: dict[tuple[str, int], set[str]] = defaultdict(set)
        for command in self.commands:
            if command.what == "applied" and command.claim is not None:
                holders[(command.scope, command.token)].add(command.claim)
        return sum(1 for claims in holders.values() if len(claims) > 1)

    def count(self, what: str) -> int:
        """Commands by what was done with them; `"unclaimed"`: applied without a claim."""
        if what == "unclaimed":
            return sum(c.what == "applied" and c.claim is None for c in self.commands)
        return sum(command.what == what for command in self.commands)

    def _record(self, what: str, scope: str, token: int, key: str, claim: str | None) -> None:
        with self._lock:
            self.commands.append(Command(self.clock.wall(), what, scope, token, key, claim))


class ReceiverServer(FencedServer):
    """`Receiver` over HTTP on 127.0.0.1 (a free port), on a background thread."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        super().__init__(receiver.handle)
