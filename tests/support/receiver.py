"""A fenced receiver of effects on loopback, as the seed describes it: the highest fence per
scope wins, a repeated key replays its stored answer, a lower fence with a new key is refused.
(The packaged FenceGuard is a later milestone; this one only serves the tests.)"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []
        self.refused: list[dict[str, Any]] = []
        self.replayed: list[dict[str, Any]] = []
        self._results: dict[str, Any] = {}
        self._highest: dict[str, int] = {}
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = receiver.handle(
                    self.path.strip("/"),
                    self.headers["X-Execution-Scope"],
                    int(self.headers["X-Execution-Fence"]),
                    self.headers["Idempotency-Key"],
                    body,
                )
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
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def handle(self, effect: str, scope: str, fence: int, key: str, body: Any) -> tuple[int, Any]:
        record = {"effect": effect, "scope": scope, "fence": fence, "key": key, "body": body}
        with self._lock:
            if key in self._results:
                self.replayed.append(record)
                self._highest[scope] = max(self._highest.get(scope, 0), fence)
                return 200, self._results[key]
            if fence < self._highest.get(scope, 0):
                self.refused.append(record)
                return 409, {"error": "stale_fence", "highest": self._highest[scope]}
            self._highest[scope] = fence
            self.applied.append(record)
            self._results[key] = {"receipt": f"r-{len(self.applied)}", "fence": fence}
            return 200, self._results[key]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
