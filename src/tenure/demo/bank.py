"""The demo's bank: a receiver on loopback that guards every command with a FenceGuard."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tenure.errors import StaleFence, TenureError, error_body
from tenure.fence import FenceGuard


@dataclass
class BankEvent:
    """Something the bank did, for the demo's timeline."""

    at: float
    what: str  # applied | refused | replayed
    path: str
    fence: int
    key: str
    detail: str = ""


@dataclass
class Bank:
    """Payments behind a FenceGuard; `events` is what the timeline shows."""

    guard: FenceGuard
    payments: list[dict[str, Any]] = field(default_factory=list)
    events: list[BankEvent] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(
        self,
        path: str,
        scope: str,
        fence: int,
        key: str,
        body: dict[str, Any],
        claim: str | None = None,
    ) -> tuple[int, Any]:
        def pay() -> dict[str, Any]:
            with self.lock:
                payment = {
                    "payment_id": f"pay-{len(self.payments) + 1}",
                    "amount_cents": body["amount_cents"],
                    "fence": fence,
                }
                self.payments.append(payment)
            self.events.append(
                BankEvent(time.time(), "applied", path, fence, key, payment["payment_id"])
            )
            return payment

        def reconcile() -> Any:
            earlier = self.guard.lookup(body["original_key"], scope)
            return earlier.result if earlier.ran else pay()

        try:
            result, replayed = self.guard.apply_with_status(
                scope, fence, key, reconcile if path.endswith("/reconcile") else pay, claim=claim
            )
        except StaleFence as exc:  # FenceConflict too: a second holder of the token
            self.events.append(BankEvent(time.time(), "refused", path, fence, key, str(exc)))
            answer = error_body(
                exc.error_code, str(exc), scope=scope, fence=fence, highest=exc.highest
            )
            return exc.http_status, answer
        except TenureError as exc:
            return 400, error_body("bad_request", str(exc))
        if replayed:
            self.events.append(BankEvent(time.time(), "replayed", path, fence, key))
        return 201, result


class BankServer:
    """`Bank` over HTTP on 127.0.0.1 (a free port), on a background thread."""

    def __init__(self, bank: Bank) -> None:
        self.bank = bank

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    fence = int(self.headers["X-Execution-Fence"])
                    status, answer = bank.handle(
                        self.path,
                        self.headers["X-Execution-Scope"],
                        fence,
                        self.headers["Idempotency-Key"],
                        body,
                        self.headers.get("X-Execution-Claim"),
                    )
                except (TypeError, ValueError, KeyError) as exc:
                    status, answer = 400, error_body("bad_request", str(exc))
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
