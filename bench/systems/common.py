"""Helpers shared by the systems: databases, clocks, percentiles, statement counters."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def server_cpu() -> dict[int, float]:
    """CPU so far of every PostgreSQL server process on this machine, by pid (the server is
    local in these runs; a backend that ended before the second reading is not counted)."""
    figures: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as comm:
                if comm.read().strip() != "postgres":
                    continue
            figures[int(entry)] = cpu_seconds(int(entry))
        except OSError:  # it ended meanwhile
            continue
    return figures


def server_cpu_since(before: dict[int, float]) -> float:
    """Seconds of server CPU since `before` (a `server_cpu()` reading): new backends count
    whole."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in server_cpu().items())


def commits(url: str) -> int:
    """Committed transactions of this database so far (a session's count reaches
    pg_stat_database when it ends, or within a second while it runs)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


@dataclass
class ProcessDrain:
    """What a drain by worker processes measures: the window from the first claim to the last
    end (by the database's clock), the workers' CPU and the database's commits meanwhile."""

    jobs: int
    processes: int
    window_s: float
    cpu_s: float
    commits: int | None
    server_cpu_s: float | None = None

    def figures(self) -> dict[str, Any]:
        figures: dict[str, Any] = {
            "jobs_per_s": round(self.jobs / self.window_s, 1),
            "jobs": self.jobs,
            "processes": self.processes,
            "seconds": round(self.window_s, 3),
            "cpu_us_per_job": round(self.cpu_s / self.jobs * 1e6, 1),
        }
        if self.server_cpu_s is not None:
            figures["server_cpu_us_per_job"] = round(self.server_cpu_s / self.jobs * 1e6, 1)
        if self.commits is not None:
            figures["commits_per_job"] = round(self.commits / self.jobs, 3)
        return figures
