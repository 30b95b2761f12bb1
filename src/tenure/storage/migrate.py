"""Versioned migrations: numbered .sql files kept in lockstep across dialects.

One numbered sequence holds two tracks: the fence receiver's tables (`FENCES`: files named
`NNNN_fence…`, touching only `tenure_fence_*`) and the ledger's (every other file, never touching
them). A `FenceGuard` applies the fence track alone; a ledger applies both. Because the tracks
share no table, applying one before the other gives the same schema
(tests/integration/test_migrations.py checks that the files keep to their track).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Literal

Track = Literal["fences", "ledger"]
FENCES: Track = "fences"

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema change: its number, name and SQL text."""

    version: int
    name: str
    sql: str

    @property
    def track(self) -> Track:
        """`fences` for the receiver's tables, else `ledger`."""
        return FENCES if self.name.startswith("fence") else "ledger"


def load_migrations(package: str, only: Track | None = None) -> list[Migration]:
    """The migrations in `package`/migrations, ordered by number (gaps are an error); with
    `only`, those of that track."""
    folder = resources.files(package).joinpath("migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise RuntimeError(f"migration {expected:04d} is missing in {package}")
    return [migration for migration in found if only is None or migration.track == only]
