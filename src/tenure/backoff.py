"""How long a failed attempt waits before its retry: exponential backoff with equal jitter."""

from __future__ import annotations

import random


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Between half and all of min(cap, base·2^(n-1)) seconds for attempt n."""
    ceiling = min(cap, base * 2 ** max(0, attempt - 1))
    return float(ceiling * random.uniform(0.5, 1.0))
