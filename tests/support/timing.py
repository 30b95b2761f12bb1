"""Lease timings for tests: short enough for a test to see a lease expire within seconds, and
still valid lease arithmetic (lease > (missed + 1) * heartbeat + jitter)."""

from __future__ import annotations

from typing import Any

SHORT: dict[str, Any] = {
    "lease": 1.0,
    "heartbeat": 0.25,
    "missed": 1,
    "jitter": 0.2,
    "backoff": 0.01,
}
