"""How many database connections a worker process may open: the number a pooler's
`max_client_conn` must count per worker (docs/how-to/pooler.md)."""

from __future__ import annotations

# Beside the handlers: the claim loop, the committer, the renewer and the settle pool.
SIDE_CONNECTIONS = 4
# Past this many handlers, more connections than this would mostly wait on the server.
HANDLER_CONNECTIONS_CAP = 32


def worker_pool_size(concurrency: int, configured: int = 4) -> int:
    """The pool size of a worker running `concurrency` handlers: a connection for each handler
    that writes a stage (up to 32) plus the side tasks', at least the app's own `pool_size`.
    PostgreSQL opens them as they are needed; a pooler must admit them all."""
    return max(configured, min(concurrency, HANDLER_CONNECTIONS_CAP) + SIDE_CONNECTIONS)
