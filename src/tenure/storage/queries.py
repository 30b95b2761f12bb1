"""Loads the named SQL blocks (`-- name: NAME`) of a dialect's queries.sql.

A block is named after the store method that runs it; a method of several statements names
its further steps `method__step`. A block that writes for a lease carries a `-- guard: lease`
line: `tests/test_queries.py` checks that each such block says the whole fence predicate and
that both dialects guard the same methods.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_GUARD = re.compile(r"^--\s*guard:\s*(\w+)\s*$", re.MULTILINE)
# What every lease-guarded block must say (invariant 4), in either dialect's spelling.
LEASE_PREDICATE = ("'running'", "owner_id", "fencing_token", "lease_until >")


def parse_named_queries(text: str) -> dict[str, LiteralString]:
    """Split `text` at `-- name: NAME` headers into {NAME: SQL}; comments before the first go."""
    parts = _HEADER.split(text)
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        sql = body.strip().rstrip(";").strip()
        # Our own packaged file, never user input: safe to treat as a literal.
        queries[name] = cast(LiteralString, sql)
    return queries


def guards(sql: str) -> frozenset[str]:
    """The guards a block declares (`-- guard: lease` → {"lease"})."""
    return frozenset(_GUARD.findall(sql))


def missing_predicate(sql: str) -> list[str]:
    """The parts of the lease predicate a block does not say (empty when it says them all)."""
    return [part for part in LEASE_PREDICATE if part not in sql]


def method_of(name: str) -> str:
    """The store method a block belongs to: `stage_start__effect` → `stage_start`."""
    return name.split("__", 1)[0]


def read_queries_text(package: str) -> str:
    """The text of `package`'s queries.sql."""
    return resources.files(package).joinpath("queries.sql").read_text(encoding="utf-8")


def load_queries(package: str) -> dict[str, LiteralString]:
    """The named queries of `package`'s queries.sql."""
    return parse_named_queries(read_queries_text(package))
