"""The SQLite schema: numbered migrations applied in one BEGIN IMMEDIATE transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from tenure.errors import StoreBug
from tenure.storage.migrate import Track, load_migrations
from tenure.storage.sqlite.tx import SqliteTx

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS tenure_schema_version (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"""
_REWRITES_SCHEMA = "PRAGMA writable_schema = ON"


def apply_migrations(tx: SqliteTx, only: Track | None = None) -> list[int]:
    """Apply the migrations not yet applied (with `only`, of that track); the versions applied
    now."""
    applied_now: list[int] = []
    conn = tx.conn
    conn.execute(_VERSION_TABLE)
    done = {row[0] for row in conn.execute("SELECT version FROM tenure_schema_version")}
    for migration in load_migrations("tenure.storage.sqlite", only):
        if migration.version in done:
            continue
        schema_version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
        for statement in _statements(migration.sql):
            conn.execute(statement)
        if _REWRITES_SCHEMA in migration.sql:
            # Table definitions were edited in place: every connection must re-read them.
            conn.execute(f"PRAGMA schema_version = {schema_version + 1}")
            check = conn.execute("PRAGMA integrity_check").fetchone()[0]
            if check != "ok":
                raise StoreBug(f"migration {migration.version}: integrity check: {check}")
        conn.execute(
            "INSERT INTO tenure_schema_version (version, name, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.name, tx.now),
        )
        applied_now.append(migration.version)
    return applied_now


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements (executescript would commit our transaction)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statement = buffer.strip()
            buffer = ""
            if statement.strip(";").strip():
                yield statement
    if buffer.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buffer.splitlines()
    ):
        raise ValueError("migration ends with an incomplete statement")
