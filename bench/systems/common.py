"""Helpers shared by the systems: databases, clocks, percentiles, statement counters."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import psycopg


def with_database(url: str, name: str) -> str:
    """The server URL pointing at database `name` instead."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def fresh_database(server_url: str, name: str) -> str:
    """Drop and create database `name` on the server; return its URL."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(server_url, name)


def analyze(url: str) -> None:
    """What autovacuum would do within its first minute: fresh statistics for the planner."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def transactions(url: str) -> int:
    """Committed transactions of this database so far (each autocommit statement is one)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `predicate` until true; raise after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g}s")
        time.sleep(0.005)


def latency_figures(samples_ms: list[float]) -> dict[str, float]:
    """p50, p95 and max of a list of milliseconds."""
    ordered = sorted(samples_ms)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
        "max_ms": round(ordered[-1], 2),
        "samples": len(ordered),
    }
