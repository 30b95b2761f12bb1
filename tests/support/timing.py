"""The one lease timing of the tests' job classes: short enough for a test to see a lease
expire (a killed worker's job taken again) within seconds, and still valid lease arithmetic
(lease > (missed + 1) * heartbeat + jitter) with room for a busy two-core machine."""

from __future__ import annotations

from typing import Any

FAST: dict[str, Any] = {
    "lease": 1.0,
    "heartbeat": 0.25,
    "missed": 1,
    "jitter": 0.3,
    "backoff": 0.01,
}
