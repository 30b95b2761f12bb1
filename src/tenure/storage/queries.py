"""Loads the named SQL blocks (`-- name: NAME`) of a dialect's queries.sql."""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


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


def load_queries(package: str) -> dict[str, LiteralString]:
    """The named queries of `package`'s queries.sql."""
    text = resources.files(package).joinpath("queries.sql").read_text(encoding="utf-8")
    return parse_named_queries(text)
