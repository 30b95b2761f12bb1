"""The report `tenure chaos` prints: every figure, those that must hold in capitals, then
the checks and the verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass
class Figures:
    """The report: every figure by name, and each check with whether it held."""

    values: dict[str, Any] = field(default_factory=dict)
    checks: list[tuple[str, bool]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every check held."""
        return all(ok for _, ok in self.checks)


def print_report(figures: Figures, out: TextIO) -> None:
    """The report as a table, each figure that must hold marked, then each check."""
    v = figures.values
    rows = [
        ("database", v["database"]),
        ("jobs accepted", v["jobs_accepted"]),
        ("jobs succeeded", v["jobs_succeeded"]),
        ("jobs failed (by reason)", v["jobs_failed"] or 0),
        ("JOBS LOST (must be 0)", v["jobs_lost"]),
        ("effects applied", v["effects_applied"]),
        ("EFFECTS APPLIED PER KEY, MAX (must be 1)", v["effects_applied_max_per_key"]),
        (
            "succeeded without exactly one of each effect (must be 0)",
            v["succeeded_without_exactly_one_effect"],
        ),
        ("STALE RESULTS ACCEPTED (must be 0)", v["stale_results_accepted"]),
        ("stale results rejected", v["stale_results_rejected"]),
        ("stale effects refused by the fence", v["stale_effects_refused"]),
        ("equal tokens from another claim refused", v["fence_conflicts_refused"]),
        (
            "TOKENS ACCEPTED TWICE AT THE RECEIVER (must be 0)",
            v["tokens_accepted_twice_at_receiver"],
        ),
        (
            "effects applied without a claim (must be 0)",
            v["effects_applied_without_a_claim"],
        ),
        ("WORKER EXITS (must be 0)", v["worker_exits"]),
        ("in-doubt effects replayed by the receiver", v["effects_replayed"]),
        ("leases expired / reclaimed", f"{v['leases_expired']} / {v['leases_reclaimed']}"),
        ("stages in doubt", v["stages_in_doubt"]),
        ("parents (wait for a signal, spawn, wait, sleep)", v["parents"]),
        ("parents succeeded", v["parents_succeeded"]),
        ("PARENTS LOST (must be 0)", v["parents_lost"]),
        ("CHILDREN PER PARENT SLOT (must be {1: all})", v["children_per_parent"] or "-"),
        (
            "signals sent / conflicts refused",
            f"{v['signals_sent']} / {v['signal_conflicts_refused']}",
        ),
        ("SIGNALS APPLIED TWICE (must be 0)", v["signals_applied_twice"]),
        ("parent suspensions (job_waiting)", v["parent_waits"]),
        ("ownership unknown (events)", v["ownership_unknown"]),
        (
            "faults injected",
            ", ".join(f"{k} {n}" for k, n in sorted(v["faults_injected"].items())) or "none",
        ),
        (
            "time to drain",
            "did not drain" if v["time_to_drain_s"] is None else f"{v['time_to_drain_s']} s",
        ),
        ("run (faults + drain)", f"{v['duration_s']} s"),
    ]
    pair = v.get("pair")
    if pair:
        rows += [
            ("replication", pair["replication"]),
            (
                "failovers / switchovers / restores",
                f"{pair['failovers']} / {pair['switchovers']} / {pair['restores']}",
            ),
            ("TOKENS HANDED OUT TWICE (must be 0)", pair["tokens_handed_out_twice"]),
            ("highest token", pair["highest_token"]),
            ("submits acknowledged during the run", pair["submits_acknowledged_during_run"]),
            ("acknowledged submits lost", pair["acknowledged_submits_lost"]),
            (
                "acknowledged submits undone by a restore (after its backup)",
                pair["acknowledged_submits_undone_by_restore"],
            ),
            ("s from switch to first claim", pair["seconds_to_first_claim_after_switch"]),
            ("s from switch to first submit", pair["seconds_to_first_submit_after_switch"]),
        ]
    width = max(len(name) for name, _ in rows)
    out.write("\n")
    for name, value in rows:
        out.write(f"  {name:<{width}}  {value}\n")
    for kind, reason in sorted(v["faults_not_applicable"].items()):
        out.write(f"  (no {kind}: {reason})\n")
    for gone in v["worker_exits_detail"]:
        out.write(
            f"  (worker {gone['slot']} pid {gone['pid']} exited with {gone['returncode']}: "
            f"{gone['log']})\n"
        )
    out.write("\n")
    for name, ok in figures.checks:
        out.write(f"  {'ok  ' if ok else 'FAIL'}  {name}\n")
    out.write(
        f"\n  {'all guarantees held' if figures.ok else 'A GUARANTEE FAILED'}"
        f" (workspace {v['workspace']})\n"
    )
