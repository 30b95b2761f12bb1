"""Versioned migrations: numbered .sql files kept in lockstep across dialects."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema change: its number, name and SQL text."""

    version: int
    name: str
    sql: str


def load_migrations(package: str) -> list[Migration]:
    """The migrations in `package`/migrations, ordered by number; gaps are an error."""
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
    return found
