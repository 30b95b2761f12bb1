"""Evaluations: a golden set of finished jobs replayed through a candidate app (effects never
sent, as `tenure replay` does) and judged by the app's business assertions.

`@app.assertion(kind)` registers a function of a job's payload and result; it passes by
returning True or None, fails by returning False or raising (an `AssertionError`'s message is
the reason). Each job of the set is judged twice with the baseline app's assertions: as it was
recorded, and as the candidate's replay produced it. The candidate regresses when it passes
fewer assertions than the recording did.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenure.app import App
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import InvalidArgument
from tenure.ledger import Ledger, p95
from tenure.replay import ReplayReport, replay
from tenure.types import JSON, EventType, Job, JobState
from tenure.validation import check_job_id

Assertion = Callable[[JSON, JSON], Any]
_ENDS = {EventType.JOB_SUCCEEDED, EventType.JOB_FAILED, EventType.JOB_CANCELLED}


@dataclass(slots=True)
class JobEvaluation:
    """One job of the golden set: the recording and the candidate, judged alike."""

    job_id: str
    kind: str
    recorded_state: str
    assertions: int
    recorded_passed: int
    replayed_passed: int
    failures: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)
    stages_differ: int = 0
    effects_added: int = 0
    effects_dropped: int = 0
    result_differs: bool = False
    recorded_ms: float | None = None
    replayed_ms: float = 0.0
    recorded_tokens: int = 0
    recorded_usd: float = 0.0
    replayed_tokens: int = 0
    replayed_usd: float = 0.0
    error: str | None = None


@dataclass(slots=True)
class EvaluationReport:
    """The whole set: per job and in total."""

    baseline: str
    candidate: str
    jobs: list[JobEvaluation]

    @property
    def recorded_passed(self) -> int:
        return sum(job.recorded_passed for job in self.jobs)

    @property
    def replayed_passed(self) -> int:
        return sum(job.replayed_passed for job in self.jobs)

    @property
    def assertions(self) -> int:
        return sum(job.assertions for job in self.jobs)

    @property
    def regressed(self) -> bool:
        """True when the candidate passes fewer assertions than the recording did."""
        return self.replayed_passed < self.recorded_passed

    def totals(self) -> dict[str, Any]:
        recorded = [job.recorded_ms for job in self.jobs if job.recorded_ms is not None]
        return {
            "jobs": len(self.jobs),
            "assertions": self.assertions,
            "recorded_passed": self.recorded_passed,
            "replayed_passed": self.replayed_passed,
            "stages_differ": sum(job.stages_differ for job in self.jobs),
            "effects_added": sum(job.effects_added for job in self.jobs),
            "effects_dropped": sum(job.effects_dropped for job in self.jobs),
            "recorded_p95_ms": p95(recorded),
            "replayed_p95_ms": p95([job.replayed_ms for job in self.jobs]),
            "recorded_tokens": sum(job.recorded_tokens for job in self.jobs),
            "replayed_tokens": sum(job.replayed_tokens for job in self.jobs),
            "recorded_usd": round(sum(job.recorded_usd for job in self.jobs), 6),
            "replayed_usd": round(sum(job.replayed_usd for job in self.jobs), 6),
            "regressed": self.regressed,
        }


def golden_set(ledger: Ledger, kind: str, since_seconds: float) -> list[str]:
    """The ids of the finished jobs of `kind` created in the last `since_seconds`, oldest first."""
    horizon = ledger.now().timestamp() - since_seconds
    found: list[Job] = []
    after: str | None = None
    while True:
        page = ledger.list(kind=kind, limit=500, after=after)
        found += [j for j in page if j.terminal and j.created_at.timestamp() >= horizon]
        if len(page) < 500 or page[-1].created_at.timestamp() < horizon:
            break
        after = page[-1].id
    if not found:
        raise InvalidArgument(
            f"no finished jobs of kind {kind!r} in that window: nothing to evaluate"
        )
    return [job.id for job in reversed(found)]


def read_job_ids(path: Path) -> list[str]:
    """Job ids from a file: a JSON list of ids, or one id per line (# comments allowed)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"cannot read the jobs file {str(path)!r}: {exc.strerror}") from None
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            ids = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(f"{path}: not a JSON list of job ids ({exc.msg})") from None
        if not isinstance(ids, list):
            raise InvalidArgument(f"{path}: expected a JSON list of job ids")
    else:
        ids = [line.split("#")[0].strip() for line in text.splitlines()]
        ids = [value for value in ids if value]
    checked = []
    for number, value in enumerate(ids, 1):
        try:
            checked.append(check_job_id(value))
        except Exception:
            raise InvalidArgument(f"{path}: entry {number} is not a job id: {value!r}") from None
    if not checked:
        raise InvalidArgument(f"{path}: no job ids in it")
    return checked


def evaluate(
    ledger: Ledger,
    job_ids: list[str],
    baseline: App,
    candidate: App | None = None,
    *,
    names: tuple[str, str] = ("baseline", "candidate"),
    clock: Clock = SYSTEM_CLOCK,
) -> EvaluationReport:
    """Replay each job through `candidate` (default: `baseline`) and judge both runs with the
    baseline's assertions (each replay timed by `clock`). Nothing is written and no effect is
    sent."""
    candidate = candidate or baseline
    jobs = [ledger.get(job_id) for job_id in job_ids]  # every id known before any replay
    unfinished = [job.id for job in jobs if not job.terminal]
    if unfinished:
        raise InvalidArgument(f"only finished jobs make a golden set; not yet: {unfinished[0]}")
    report = EvaluationReport(names[0], names[1], [])
    for job in jobs:
        if job.state is JobState.CANCELLED:  # what it did is what a cancel left: not re-run
            report.jobs.append(_judge(ledger, job, None, baseline, 0.0))
            continue
        started = clock.monotonic()
        replayed = replay(ledger, job.id, candidate)
        elapsed_ms = (clock.monotonic() - started) * 1000
        report.jobs.append(_judge(ledger, job, replayed, baseline, elapsed_ms))
    return report


def _judge(
    ledger: Ledger, job: Job, replayed: ReplayReport | None, baseline: App, elapsed_ms: float
) -> JobEvaluation:
    """The baseline's assertions on the recording and on the replay (a cancelled job is not
    replayed: both sides are judged on what the cancel left, no result)."""
    checks = baseline.assertions.get(job.kind, [])
    result = job.result if job.state is JobState.SUCCEEDED else None
    if replayed is None:
        replayed = ReplayReport(job.id, job.kind, 0, recorded_result=None)
    recorded_tokens, recorded_usd = ledger.job_cost(job.id)
    evaluation = JobEvaluation(
        job_id=job.id,
        kind=job.kind,
        recorded_state=job.state.value,
        assertions=len(checks),
        recorded_passed=0,
        replayed_passed=0,
        differing=[f"{s.kind} {s.name}" for s in replayed.stages if s.differs],
        stages_differ=sum(stage.differs for stage in replayed.stages),
        effects_added=_effects(replayed, "new"),
        effects_dropped=_effects(replayed, "gone"),
        result_differs=replayed.result_differs,
        recorded_ms=_recorded_ms(ledger, job.id),
        replayed_ms=round(elapsed_ms, 3),
        recorded_tokens=recorded_tokens,
        recorded_usd=round(recorded_usd, 6),
        replayed_tokens=replayed.tokens,
        replayed_usd=round(replayed.usd, 6),
        error=replayed.error,
    )
    for check in checks:
        name = getattr(check, "__name__", "assertion")
        ok, _ = _holds(check, job.payload, result)
        evaluation.recorded_passed += ok
        if replayed.error is not None:
            evaluation.failures.append(f"{name}: the replay raised {replayed.error}")
            continue
        ok, why = _holds(check, job.payload, replayed.replayed_result)
        evaluation.replayed_passed += ok
        if not ok:
            evaluation.failures.append(f"{name}: {why}")
    return evaluation


def _holds(check: Assertion, payload: JSON, result: JSON) -> tuple[bool, str]:
    try:
        verdict = check(payload, result)
    except AssertionError as exc:
        return False, str(exc) or "assertion failed"
    except Exception as exc:  # an assertion that breaks fails, and says how
        return False, f"raised {type(exc).__name__}: {exc}"
    return (False, "returned False") if verdict is False else (True, "")


def _effects(report: ReplayReport, note: str) -> int:
    return sum(s.kind == "effect" and s.note.startswith(note) for s in report.stages)


def _recorded_ms(ledger: Ledger, job_id: str) -> float | None:
    """From the job's first claim to its end, as its events say (None if never claimed)."""
    events = ledger.events(job_id)
    claimed = next((e.at for e in events if e.type is EventType.JOB_CLAIMED), None)
    ended = next((e.at for e in reversed(events) if e.type in _ENDS), None)
    if claimed is None or ended is None:
        return None
    return round((ended - claimed).total_seconds() * 1000, 3)
