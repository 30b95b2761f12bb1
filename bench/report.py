"""The benchmark's table (with tenure/peer ratios) and chart, from its JSON report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TENURE = "tenure (PostgreSQL)"
PEERS = ("Procrastinate", "PgQueuer", "awa")
# measure: (label, key in the figures, unit, higher is better)
ROWS: list[tuple[str, str, str, str, bool]] = [
    ("enqueue_single", "enqueue, one per call", "jobs_per_s", "jobs/s", True),
    ("enqueue_batch", "enqueue, batches of 500", "jobs_per_s", "jobs/s", True),
    ("drain", "drain no-op jobs, in-process Worker", "jobs_per_s", "jobs/s", True),
    ("drain_1p", "drain, 1 worker process, defaults", "jobs_per_s", "jobs/s", True),
    ("drain_2p", "drain, 2 worker processes, defaults", "jobs_per_s", "jobs/s", True),
    ("drain_1p", "worker CPU per job, 1 process", "cpu_us_per_job", "µs", False),
    ("drain_2p", "worker CPU per job, 2 processes", "cpu_us_per_job", "µs", False),
    ("drain_1p", "database server CPU per job, 1 process", "server_cpu_us_per_job", "µs", False),
    ("drain_2p", "database server CPU per job, 2 processes", "server_cpu_us_per_job", "µs", False),
    ("drain_1p", "database commits per job, 1 process", "commits_per_job", "", False),
    ("drain_2p", "database commits per job, 2 processes", "commits_per_job", "", False),
    ("latency", "idle latency p50", "p50_ms", "ms", False),
    ("latency", "idle latency p95", "p95_ms", "ms", False),
    ("heartbeats", "statements/s holding leases", "statements_per_s", "/s", False),
    ("failover", "SIGKILL → handler elsewhere", "kill_to_handler_s", "s", False),
    ("claim_10k", "claim, 10k finished rows", "claim_p50_ms", "ms", False),
    ("claim_1m", "claim, large history", "claim_p50_ms", "ms", False),
    ("fairness", "smallest share of 3 worker processes", "min_share", "of jobs", True),
    ("sql_limit", "SQL-only claim+complete ceiling", "jobs_per_s", "jobs/s", True),
]


def _value(report: dict[str, Any], measure: str, system: str, key: str) -> Any:
    figures = report["results"].get(measure, {}).get(system)
    if figures is None:
        return None
    if "error" in figures:
        return "error"
    if "unsupported" in figures:
        return "n/a"
    return figures.get(key)


def _systems(report: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for per_system in report["results"].values():
        for name in per_system:
            if name not in seen:
                seen.append(name)
    return seen


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float | int):
        return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    return str(value)


def table(report: dict[str, Any]) -> str:
    """A Markdown table: one row per figure, one column per system, then tenure ÷ peer."""
    systems = _systems(report)
    ratio_heads = [f"tenure PG vs {peer}" for peer in PEERS if peer in systems]
    head = ["measure", *systems, *ratio_heads]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for measure, row_label, key, unit, higher in ROWS:
        if measure not in report["results"]:
            continue
        label = row_label
        history = report["results"][measure].get(TENURE, {}).get("history_rows")
        if measure == "claim_1m" and history:
            label = f"claim, {history:,} finished rows"
        values = [_value(report, measure, system, key) for system in systems]
        ratios = []
        for peer in PEERS:
            if peer not in systems:
                continue
            ours, theirs = (_value(report, measure, s, key) for s in (TENURE, peer))
            if (
                isinstance(ours, int | float)
                and isinstance(theirs, int | float)
                and ours
                and theirs
            ):
                ratio = ours / theirs if higher else theirs / ours
                ratios.append(f"{ratio:.2f}x")
            else:
                ratios.append("")
        lines.append("| " + " | ".join([f"{label} ({unit})", *map(_cell, values), *ratios]) + " |")
    lines.append("")
    lines.append("Ratios: how many times better tenure on PostgreSQL is (>1: tenure ahead).")
    return "\n".join(lines)


def chart(report: dict[str, Any], path: Path) -> None:
    """One bar panel per figure, a bar per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = _systems(report)
    rows = [row for row in ROWS if row[0] in report["results"]]
    columns = 3
    count = len(rows)
    figure, axes = plt.subplots(
        (count + columns - 1) // columns, columns, figsize=(15, 3.6 * ((count + 2) // 3))
    )
    colours = ["#1f6f8b", "#5aa9c8", "#c77d3a", "#8a5a9e", "#9a9a9a", "#c4c4c4"]
    for axis, (measure, label, key, unit, higher) in zip(axes.flat, rows, strict=False):
        names, heights, shades = [], [], []
        for index, system in enumerate(systems):
            value = _value(report, measure, system, key)
            if isinstance(value, int | float):
                names.append(system.replace(" (", "\n("))
                heights.append(value)
                shades.append(colours[index % len(colours)])
        axis.bar(names, heights, color=shades)
        better = "higher is better" if higher else "lower is better"
        axis.set_title(f"{label} ({unit}, {better})", fontsize=10)
        axis.tick_params(axis="x", labelsize=8)
        for x, height in enumerate(heights):
            axis.annotate(_cell(height), (x, height), ha="center", va="bottom", fontsize=8)
    for axis in list(axes.flat)[count:]:
        axis.axis("off")
    machine = report["machine"]
    figure.suptitle(
        f"tenure vs peers — {report['mode']} run, concurrency {report['concurrency']}, "
        f"{machine['cpus']} CPUs, PostgreSQL {machine['postgres']['server_version'].split()[0]}"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _figure(report: dict[str, Any], measure: str, system: str, key: str) -> float | None:
    value = _value(report, measure, system, key)
    return float(value) if isinstance(value, int | float) else None


def targets(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Issue 7's targets against this run: (target, what was measured, met / missed)."""
    rows: list[tuple[str, str, str]] = []

    def check(name: str, value: float | None, limit: float, text: str, at_least: bool) -> None:
        if value is None:
            rows.append((name, "not measured in this run", ""))
            return
        met = value >= limit if at_least else value <= limit
        rows.append((name, text, "met" if met else "missed"))

    pg = _figure(report, "drain", TENURE, "jobs_per_s")
    peer = _figure(report, "drain", "PgQueuer", "jobs_per_s")
    if pg and peer:
        check("drain (PostgreSQL) ≥ PgQueuer's", pg / peer, 1.0, f"ratio {pg / peer:.2f}", True)
    awa = _figure(report, "drain", "awa", "jobs_per_s")
    if pg and awa:
        check(
            f"drain (PostgreSQL) ahead of awa's, {report['concurrency']} slots",
            pg / awa,
            1.0,
            f"ratio {pg / awa:.2f} ({pg:,.0f} vs {awa:,.0f} jobs/s)",
            True,
        )
    for measure, processes in (("drain_1p", "1 process"), ("drain_2p", "2 processes")):
        ours = _figure(report, measure, TENURE, "jobs_per_s")
        theirs = _figure(report, measure, "PgQueuer", "jobs_per_s")
        if ours and theirs:
            check(
                f"`tenure worker` drain, {processes}, defaults ≥ PgQueuer's",
                ours / theirs,
                1.0,
                f"ratio {ours / theirs:.2f} ({ours:,.0f} vs {theirs:,.0f} jobs/s)",
                True,
            )
    one = _figure(report, "drain_1p", TENURE, "jobs_per_s")
    two = _figure(report, "drain_2p", TENURE, "jobs_per_s")
    if one and two:
        check("a second `tenure worker` process adds", two / one, 1.0 + 1e-9,
              f"{two / one:.2f}x of one", True)  # fmt: skip
    raw_pg = _figure(report, "sql_limit", "SQL only (PostgreSQL)", "jobs_per_s")
    if pg and raw_pg:
        share = pg / raw_pg
        check("drain (PostgreSQL) ≥ 40% of SQL only", share, 0.4, f"{share:.0%}", True)
    lite = _figure(report, "drain", "tenure (SQLite)", "jobs_per_s")
    raw_lite = _figure(report, "sql_limit", "SQL only (SQLite)", "jobs_per_s")
    if lite and raw_lite:
        share = lite / raw_lite
        check("drain (SQLite, FULL) ≥ 50% of SQL only", share, 0.5, f"{share:.0%}", True)
    p50 = _figure(report, "latency", TENURE, "p50_ms")
    peers = [_figure(report, "latency", name, "p50_ms") for name in PEERS]
    check("idle latency p50 (PostgreSQL) ≤ 2 ms", p50, 2.0, f"{p50} ms", False)
    known = [value for value in peers if value is not None]
    if p50 is not None and known:
        check(
            "idle latency p50 below every peer measured",
            p50,
            min(known) - 1e-9,
            f"{p50} vs {min(known)} ms",
            False,
        )
    beats = _figure(report, "heartbeats", TENURE, "renewal_statements_per_s")
    leases = report["results"].get("heartbeats", {}).get(TENURE, {}).get("leases")
    check(
        f"renewals for {leases or '?'} leases ≈ workers / interval (1 / 5 s)",
        beats,
        0.25,
        f"{beats} statements/s",
        False,
    )
    small = _figure(report, "claim_10k", TENURE, "claim_p50_ms")
    large = _figure(report, "claim_1m", TENURE, "claim_p50_ms")
    if small and large:
        check(
            "claim, large history ≤ 1.2x of 10k",
            large / small,
            1.2,
            f"{large / small:.2f}x",
            False,
        )
    for system in (TENURE, "tenure (SQLite)"):
        figures = report["results"].get("failover", {}).get(system, {})
        if "kill_to_handler_s" in figures:
            limit = figures["lease_s"] + 1.0
            check(
                f"failover ({system.split('(')[1][:-1]}) ≤ lease + 1 s",
                figures["kill_to_handler_s"],
                limit,
                f"{figures['kill_to_handler_s']} s (lease {figures['lease_s']:g} s)",
                False,
            )
    fair_share = _figure(report, "fairness", "tenure (SQLite)", "min_share")
    check(
        "SQLite: each of 3 processes a fair share (≥ 25%)",
        fair_share,
        0.25,
        f"smallest {fair_share}",
        True,
    )
    return rows


def targets_table(report: dict[str, Any]) -> str:
    lines = ["| target | this run | |", "| --- | --- | --- |"]
    lines += [f"| {name} | {text} | {verdict} |" for name, text, verdict in targets(report)]
    return "\n".join(lines)
