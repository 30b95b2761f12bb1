"""The benchmark's table (with tenure/peer ratios) and chart, from its JSON report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TENURE = "tenure (PostgreSQL)"
PEERS = ("Procrastinate", "PgQueuer")
# measure: (label, key in the figures, unit, higher is better)
ROWS: list[tuple[str, str, str, str, bool]] = [
    ("enqueue_single", "enqueue, one per call", "jobs_per_s", "jobs/s", True),
    ("enqueue_batch", "enqueue, batches of 500", "jobs_per_s", "jobs/s", True),
    ("drain", "drain no-op jobs", "jobs_per_s", "jobs/s", True),
    ("latency", "idle latency p50", "p50_ms", "ms", False),
    ("latency", "idle latency p95", "p95_ms", "ms", False),
    ("heartbeats", "statements/s holding leases", "statements_per_s", "/s", False),
    ("failover", "SIGKILL → handler elsewhere", "kill_to_handler_s", "s", False),
    ("claim_10k", "claim, 10k finished rows", "claim_p50_ms", "ms", False),
    ("claim_1m", "claim, large history", "claim_p50_ms", "ms", False),
    ("fairness", "smallest share of 3 worker processes", "min_share", "of jobs", True),
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
    colours = ["#1f6f8b", "#5aa9c8", "#c77d3a", "#8a5a9e"]
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
