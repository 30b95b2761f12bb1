"""A receiver of fenced commands over HTTP on loopback, for the demo's bank and the chaos
receiver: it reads the headers `tenure.fence.headers(fx)` sends, runs the command through a
`FenceGuard`, and answers a refusal as `FenceMiddleware` does (409 `stale_fence` or
`fence_conflict` with the receiver's highest token), so that `tenure.fence.raise_for_refusal`
reads it back."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tenure.errors import StaleFence, StoreUnavailable, TenureError, error_body
from tenure.fence import headers, raise_for_refusal
from tenure.types import Effect


@dataclass(frozen=True, slots=True)
class FencedCommand:
    """One request: where it was sent, its fence headers and its JSON body."""

    path: str
    scope: str
    token: int
    key: str
    claim: str | None
    body: dict[str, Any]


def refusal(command: FencedCommand, exc: StaleFence) -> tuple[int, dict[str, Any]]:
    """The answer to a refused command (`StaleFence` or `FenceConflict`), as `FenceMiddleware`
    gives it: 409 with the code, the scope, the fence and the receiver's highest token."""
    body = error_body(
        exc.error_code, str(exc), scope=command.scope, fence=command.token, highest=exc.highest
    )
    return exc.http_status, body


class FencedServer:
    """Commands over HTTP on 127.0.0.1 (a free port), each handed to `handle`, on a
    background thread. Malformed headers are a 400 `bad_fence_headers`; the guard's database
    away a 503; another tenure error a 400."""

    def __init__(self, handle: Callable[[FencedCommand], tuple[int, Any]]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    command = FencedCommand(
                        self.path,
                        self.headers["X-Execution-Scope"],
                        int(self.headers["X-Execution-Fence"]),
                        self.headers["Idempotency-Key"],
                        self.headers.get("X-Execution-Claim"),
                        json.loads(self.rfile.read(length) or b"{}"),
                    )
                    status, answer = handle(command)
                except (TypeError, ValueError, KeyError) as exc:
                    status, answer = 400, error_body("bad_fence_headers", str(exc))
                except StoreUnavailable as exc:
                    status, answer = exc.http_status, error_body(exc.error_code, str(exc))
                except TenureError as exc:
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


def post_fenced(url: str, fx: Effect, body: dict[str, Any], key: str | None = None) -> Any:
    """POST `body` to a fenced receiver on loopback with the effect's headers (its key, or
    `key`; its token, scope and claim); its JSON answer. A refusal is `StaleFence` (or
    `FenceConflict`) with the receiver's highest token, for the worker to floor the job at."""
    sent = {**headers(fx), **({"Idempotency-Key": key} if key else {})}
    request = urllib.request.Request(  # noqa: S310 - the demo's or the harness's receiver
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **sent},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise_for_refusal(exc.code, exc.read())
        raise
