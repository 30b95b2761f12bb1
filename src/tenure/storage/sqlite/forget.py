"""Forget a kind outright in a SQLite file: its jobs in any state with every row of theirs,
and its declaration. Not a purge (which deletes old ended jobs of every kind): `tenure demo`
runs its jobs under a kind of its own in a file it was given, and leaves none of them."""

from __future__ import annotations

import sqlite3

from tenure.errors import StoreUnavailable
from tenure.storage.sqlite.store import path_from_url


def forget_kind(url: str, kind: str, *, timeout: float = 10.0) -> int:
    """Delete the jobs of `kind` (with the rows of every table that names a job, found in the
    file's schema so that a later table is not missed) and its row in `tenure_kinds`, in one
    transaction; return how many jobs went. Run it once no worker of the kind is left."""
    path = path_from_url(url)
    try:
        conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                jobs = _delete(conn, kind)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreUnavailable(
            f"SQLite database {path}: could not delete kind {kind!r}: {exc}"
        ) from exc
    return jobs


def _delete(conn: sqlite3.Connection, kind: str) -> int:
    tables = [
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tenure\\_%' "
            "ESCAPE '\\'"
        )
    ]
    if "tenure_jobs" not in tables:
        return 0
    ids = "SELECT id FROM tenure_jobs WHERE kind = ?"
    for table in tables:
        columns = {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}
        if table != "tenure_jobs" and "job_id" in columns:
            conn.execute(f'DELETE FROM "{table}" WHERE job_id IN ({ids})', (kind,))
    jobs = conn.execute("DELETE FROM tenure_jobs WHERE kind = ?", (kind,)).rowcount
    if "tenure_kinds" in tables:
        conn.execute("DELETE FROM tenure_kinds WHERE kind = ?", (kind,))
    return jobs
