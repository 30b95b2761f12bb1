"""One BEGIN IMMEDIATE transaction of the SQLite store: named queries, each handed `:now`."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from tenure.storage.queries import load_queries
from tenure.storage.rows import Row
from tenure.storage.seam import Params
from tenure.types import EventType, Lease

Q = load_queries("tenure.storage.sqlite")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class SqliteTx:
    """Named queries inside one BEGIN IMMEDIATE transaction; each is handed `:now`.

    What the transaction made known is collected here and told to this process's workers and
    waiters once it has committed: kinds that became claimable, cancels, jobs that ended.
    """

    def __init__(self, conn: sqlite3.Connection, now: float) -> None:
        self.conn = conn
        self.now = now
        self.claimable: list[str] = []
        self.cancelled: list[tuple[str, int]] = []
        self.ended: list[str] = []

    def rows(self, name: str, params: Params | None = None) -> Sequence[Row]:
        return self.conn.execute(Q[name], {"now": self.now, **(params or {})}).fetchall()

    def one(self, name: str, params: Params | None = None) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.conn.execute(
            Q[name], {"now": self.now, **(params or {})}
        ).fetchone()
        return row

    def job_ended(self, job_id: str, parent_id: str | None) -> None:
        """The job ended in this transaction: its waiters are told after the commit, and a
        parent that waits for it is woken now (writers take turns: no suspend slips between)."""
        self.ended.append(job_id)
        if parent_id is not None:
            rows = self.rows("exchange__wake_parent", {"parent_id": parent_id, "child_id": job_id})
            self.claimable += [row["kind"] for row in rows]

    def event(
        self,
        job_id: str,
        type: EventType,
        token: int | None,
        owner_id: str | None,
        detail: dict[str, Any] | str,
    ) -> None:
        """Append an event in this transaction (the caller knows the job exists)."""
        detail_json = detail if isinstance(detail, str) else _dumps(detail)
        self.rows(
            "record_event__unchecked",
            {
                "job_id": job_id,
                "type": type,
                "token": token,
                "owner_id": owner_id,
                "detail": detail_json,
            },
        )

    def lease_event(self, lease: Lease, type: EventType, detail: dict[str, Any] | str) -> None:
        """Append an event written under `lease`: its job, token and owner."""
        self.event(lease.job_id, type, lease.token, lease.owner_id, detail)
