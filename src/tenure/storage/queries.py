"""Loads the named SQL blocks (`-- name: NAME`) of a dialect's `.sql` files, one file per
aggregate (jobs, leases, stages, waits, fences, tenants, retention, rollouts, evidence).

A block is named after the store method that runs it; a method of several statements names
its further steps `method__step`. A block that writes for a lease carries a `-- guard: lease`
line: `tests/unit/test_queries.py` checks that each such block says the whole fence predicate and
that both dialects guard the same methods.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
# `-- guard: lease (model: ACTION)`: the guard, and the action of model/tenure.pml it is.
_GUARD = re.compile(r"^--\s*guard:\s*(\w+)(?:\s+\(model:\s*\w+\))?\s*$", re.MULTILINE)
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


def read_queries_texts(package: str) -> dict[str, str]:
    """The text of each of `package`'s `.sql` files, by file name."""
    files = resources.files(package)
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in sorted(files.iterdir(), key=lambda entry: entry.name)
        if entry.name.endswith(".sql")
    }


def load_queries(package: str) -> dict[str, LiteralString]:
    """The named queries of all `package`'s `.sql` files; a name defined twice, in one file or
    in two, raises `ValueError`."""
    queries: dict[str, LiteralString] = {}
    for file_name, text in read_queries_texts(package).items():
        for name, sql in parse_named_queries(text).items():
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice ({file_name})")
            queries[name] = sql
    return queries
