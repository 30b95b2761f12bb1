"""The first connection: direct or through a transaction pooler, and where LISTEN goes.

`plan_connection` makes one connection before the pool opens, so that the server's own answer
(no such database, only standbys, a refused login) is said at once, and so that a pooler that
refuses startup options is recognised (see `storage.postgres.pooling`). `check_listen_url`
proves that a separate LISTEN URL hears what the store sends, which a transaction pooler does
not: LISTEN through one silently receives nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import StoreUnavailable, UnsupportedDatabase
from tenure.logs import emit
from tenure.storage.postgres.pooling import (
    option_settings,
    refuses_options,
    split_choices,
)
from tenure.storage.postgres.urls import (
    build_conninfo,
    describe,
    explain_connect_error,
    tenure_settings,
    url_options,
)

log = logging.getLogger("tenure.storage")


@dataclass(frozen=True, slots=True)
class ConnectionPlan:
    """How the store connects: `pooled` through a transaction pooler (`local_settings` then
    set in each transaction), whether statements may be prepared, and where LISTEN goes
    (None: nowhere; workers and waiters poll)."""

    where: str
    conninfo: str
    pooled: bool
    prepare: bool
    local_settings: tuple[tuple[str, str], ...]
    listen_conninfo: str | None
    listen_where: str | None


def plan_connection(url: str, timeout: float, listen_url: str | None) -> ConnectionPlan:
    """Connect once, as the URL asks or as the server's answer shows, and say how."""
    stripped, choices = split_choices(url)
    where = describe(stripped)
    pooled = choices.pooler
    direct = build_conninfo(stripped, timeout)
    if not pooled:
        try:
            _probe(direct)
            pooled = False
        except psycopg.Error as exc:
            if pooled is not None or not refuses_options(exc):
                raise StoreUnavailable(explain_connect_error(exc, where)) from exc
            pooled = True
            emit(log, logging.INFO, "pooler_detected", database=where)
    listen_conninfo, listen_where = _listen_target(listen_url, timeout)
    if not pooled:
        return ConnectionPlan(
            where=where,
            conninfo=direct,
            pooled=False,
            prepare=choices.prepare is not False,
            local_settings=(),
            listen_conninfo=listen_conninfo or direct,
            listen_where=listen_where or where,
        )
    prepare = bool(choices.prepare)
    conninfo = build_conninfo(stripped, timeout, startup_options=False)
    try:
        _probe(conninfo)
        if prepare and not _keeps_prepared_statements(conninfo):
            raise UnsupportedDatabase(
                f"prepare=1 in the URL of {where}: the pooler there leaves a prepared "
                "statement on the server connection that prepared it (PgBouncer before 1.21, "
                "or with max_prepared_statements = 0), where a later transaction may not be: "
                "set max_prepared_statements in pgbouncer.ini (PgBouncer 1.21 or later), or "
                "leave prepare=1 out"
            )
    except psycopg.Error as exc:
        raise StoreUnavailable(explain_connect_error(exc, where)) from exc
    settings = option_settings(url_options(stripped)) + tenure_settings(timeout, prepare=prepare)
    if listen_conninfo is None:
        emit(log, logging.WARNING, "listen_unavailable", database=where, reason="pooler")
    return ConnectionPlan(
        where=where,
        conninfo=conninfo,
        pooled=True,
        prepare=prepare,
        local_settings=tuple(settings),
        listen_conninfo=listen_conninfo,
        listen_where=listen_where,
    )


def _probe(conninfo: str) -> None:
    psycopg.connect(conninfo, autocommit=True).close()


def _keeps_prepared_statements(conninfo: str) -> bool:
    """Whether the pooler manages protocol-level prepared statements itself.

    One transaction (so one server connection, whatever the pooler) prepares a statement and
    looks for it among the server's: a pooler that passes it through leaves it there under its
    own name, bound to that server connection; PgBouncer 1.21+ with `max_prepared_statements`
    prepares it under a name of its own on each server connection that needs it.
    """
    name = f"tenure_probe_{uuid.uuid4().hex}"
    with psycopg.connect(conninfo) as conn:
        conn.execute("SELECT 1")  # opens the transaction: the server connection is ours now
        prepared = conn.pgconn.prepare(name.encode(), b"SELECT 1")
        if prepared.status != psycopg.pq.ExecStatus.COMMAND_OK:
            raise psycopg.OperationalError(
                (prepared.error_message or b"").decode(errors="replace").strip()
            )
        row = conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE name = %s", (name,)
        ).fetchone()
        passed_through = bool(row and row[0])
        if passed_through:  # else it is the pooler's to keep
            conn.execute(sql.SQL("DEALLOCATE {}").format(sql.Identifier(name)))
        conn.rollback()
    return not passed_through


def _listen_target(listen_url: str | None, timeout: float) -> tuple[str | None, str | None]:
    if listen_url is None:
        return None, None
    stripped, choices = split_choices(listen_url)
    where = describe(stripped)
    if choices.pooler:
        raise UnsupportedDatabase(
            f"the LISTEN URL {where} says pooler=transaction: LISTEN needs a session, so it "
            "must name PostgreSQL itself (or a session pooler)"
        )
    return build_conninfo(stripped, timeout), where


def check_listen_url(
    plan: ConnectionPlan,
    notify: Callable[[str], None],
    timeout: float,
    *,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """LISTEN on the listen URL, NOTIFY through the store (`notify(channel)`), and refuse the
    URL unless the notification arrives: a transaction pooler would take the LISTEN, hand its
    server connection to another client and deliver nothing, and a URL of another database
    would hear another database's channel."""
    if plan.listen_conninfo is None or plan.listen_where is None:
        return
    where = plan.listen_where
    try:
        conn = psycopg.connect(plan.listen_conninfo, autocommit=True)
    except psycopg.Error as exc:
        if refuses_options(exc):
            raise UnsupportedDatabase(
                f"the LISTEN URL {where} refused startup options, as a connection pooler "
                "does: LISTEN through a transaction pooler silently receives nothing; give "
                "a direct URL of the PostgreSQL server"
            ) from exc
        raise StoreUnavailable(explain_connect_error(exc, where)) from exc
    channel = f"tenure_probe:{uuid.uuid4().hex}"
    with conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        notify(channel)
        deadline = clock.monotonic() + timeout
        while clock.monotonic() < deadline:
            for _ in conn.notifies(timeout=max(0.01, deadline - clock.monotonic()), stop_after=1):
                return
    raise UnsupportedDatabase(
        f"the LISTEN URL {where} did not hear a notification sent through {plan.where} within "
        f"{timeout:g}s: it is a transaction pooler (LISTEN there receives nothing) or another "
        "database; give a direct URL of the same PostgreSQL database"
    )
