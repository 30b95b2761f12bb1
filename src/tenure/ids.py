"""Job ids that sort by the time they were made (UUID version 7, RFC 9562).

A random id (version 4) lands on a random page of every index keyed by it: on a table with
history, each new job dirties pages all over the primary key and the events' job index, and
the first change of each page after a checkpoint writes the whole page to the WAL. An id that
starts with the time lands beside the last one. 74 bits stay random (122 were): still far
beyond guessing, but the first 48 tell when the job was submitted
(`docs/explanation/storage.md`). Where a short form is shown, it is the end of the id.
"""

from __future__ import annotations

import os
import uuid

from tenure.clock import SYSTEM_CLOCK, Clock

_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0x2 << 62


def new_job_id(clock: Clock = SYSTEM_CLOCK) -> str:
    """A new UUID version 7: 48 bits of Unix milliseconds (`clock`'s wall time), then 74
    random bits."""
    millis = int(clock.wall() * 1000)
    random = int.from_bytes(os.urandom(10), "big")
    rand_a = random >> 68  # 12 bits
    rand_b = random & ((1 << 62) - 1)
    value = (millis & ((1 << 48) - 1)) << 80 | _VERSION_7 | rand_a << 64 | _VARIANT_RFC | rand_b
    return str(uuid.UUID(int=value))


def new_claim_id() -> str:
    """A claim's identity (`Lease.claim`, sent to receivers as `X-Execution-Claim`): 128
    random bits as 32 hex digits, made once per claimed job."""
    return os.urandom(16).hex()
