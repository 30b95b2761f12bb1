"""Replay: run a finished job's recorded stages through a handler again, with the world
switched off, and compare.

Steps run for real (they are the computations being evaluated: a new prompt, a new model);
effects never run: each returns the result recorded for it (or None when the recorded run had
none at that place). Every stage is compared with the recorded one, and so is the handler's
result. Nothing is written to the ledger.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenure.app import App
from tenure.awaitable import at_once
from tenure.errors import InvalidArgument
from tenure.evidence import DocumentRef
from tenure.ledger import Ledger
from tenure.runtime.stage_names import StageNames
from tenure.types import JSON, CancelReason, Effect, Job, Stage, StageKind, StageStatus
from tenure.waits import (
    WaitResult,
    children_value,
    result_of,
    signal_questions,
    signal_value,
    signals_value,
)


@dataclass(slots=True)
class StageDiff:
    """One stage: what was recorded there, what the replay produced, whether they differ."""

    position: int
    name: str
    kind: str
    recorded: JSON
    replayed: JSON
    differs: bool
    note: str = ""


@dataclass(slots=True)
class ReplayReport:
    """The replay of one job: its stages and its result, side by side."""

    job_id: str
    kind: str
    handler_version: int
    stages: list[StageDiff] = field(default_factory=list)
    recorded_result: JSON = None
    replayed_result: JSON = None
    result_differs: bool = False
    error: str | None = None
    tokens: int = 0  # what the replay's steps reported they spent (`ctx.report_cost`)
    usd: float = 0.0

    @property
    def differences(self) -> int:
        """Stages that differ, plus one if the result does."""
        return sum(stage.differs for stage in self.stages) + int(self.result_differs)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class ReplayContext:
    """What the handler sees during a replay: the `JobContext` surface, the world switched off."""

    def __init__(self, job: Job, recorded: list[Stage], report: ReplayReport) -> None:
        self.job_id = job.id
        self.kind = job.kind
        self.tenant = job.tenant
        self.token = job.token
        self.attempt = job.attempt
        self.payload = job.payload
        self.variant = job.variant
        self.principal = job.principal
        self.lease_until: datetime | None = None
        self.cancelled = threading.Event()
        self.cancel_reason: CancelReason | None = None
        self._recorded = {stage.position: stage for stage in recorded}
        self._report = report
        self._position = 0
        self._names = StageNames()
        self._checkpoint = copy.deepcopy(job.checkpoint) if isinstance(job.checkpoint, dict) else {}
        self._evidence = job.evidence

    def report_cost(self, *, tokens: int = 0, usd: float = 0.0) -> None:
        """Counted in the report (a candidate's steps may cost more), written nowhere."""
        self._report.tokens += tokens
        self._report.usd += usd

    @property
    def checkpoint(self) -> dict[str, Any]:
        return copy.deepcopy(self._checkpoint)

    def check(self) -> None:
        """Never cancelled during a replay."""

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Nothing cancels a replay."""

    def note_evidence(self, reference: str) -> None:
        """Ignored during a replay."""

    def evidence(self, ref: Any, *, retriever: str | None = None) -> None:
        """Recorded nowhere during a replay."""

    def retrieve(self, name: str, query: str, limit: int = 5) -> list[DocumentRef]:
        """Search nothing: the document refs the job recorded from retriever `name`."""
        found = [e.ref for e in self._evidence if e.retriever == name]
        return [ref for ref in found if isinstance(ref, DocumentRef)][:limit]

    aretrieve = at_once(retrieve)

    def recheck_evidence(self) -> None:
        """Nothing is rechecked during a replay."""

    def note_approval(self, summary: Any) -> None:
        """Ignored during a replay."""

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run the step and compare its result with the recorded one."""
        recorded = self._next()
        return self._compare(name, recorded, fn())

    def effect(self, name: str, fn: Callable[[Effect], Any]) -> Any:
        """Do not act: return the recorded result."""
        return self._substitute(name, self._next())

    async def astep(self, name: str, fn: Callable[[], Any]) -> Any:
        """`step` for async handlers."""
        recorded = self._next()
        result = fn()
        if inspect.isawaitable(result):
            result = await result
        return self._compare(name, recorded, result)

    async def aeffect(self, name: str, fn: Callable[[Effect], Any]) -> Any:
        """`effect` for async handlers: the recorded result, nothing sent."""
        return self._substitute(name, self._next())

    def spawn(
        self,
        kind: str,
        payload: Any,
        *,
        name: str | None = None,
        priority: int | None = None,
        principal: str | None = None,
    ) -> Any:
        """Spawn nothing: the recorded child's id."""
        stage = self._names.spawn(kind, name)[1]
        return self._substitute(stage, self._next(), StageKind.STEP, "child not spawned")

    def wait_for(self, name: str, timeout: float | None = None, *, ask: Any = None) -> Any:
        """Wait for nothing: the recorded signal (or timeout); `ask` is not put again."""
        return signal_value(self._recorded_wait(self._names.signal(name)), name, timeout)

    def wait_for_all(self, questions: Any, timeout: float | None = None) -> Any:
        """Wait for nothing: the recorded signals (or timeout); no question is put again."""
        names, _ = signal_questions(questions)
        outcome = self._recorded_wait(self._names.signals(names))
        return signals_value(outcome, names, timeout)

    def wait_job(self, job: str | list[str], timeout: float | None = None) -> Any:
        """Wait for nothing: the recorded children's results (or failure, or timeout)."""
        outcome = self._recorded_wait(self._names.wait_job())
        return children_value(outcome, isinstance(job, str), timeout)

    def sleep(self, seconds: float) -> None:
        """Sleep not at all."""
        self._recorded_wait(self._names.sleep())

    await_for = at_once(wait_for)
    await_for_all = at_once(wait_for_all)
    aspawn = at_once(spawn)
    await_job = at_once(wait_job)
    asleep = at_once(sleep)

    def _recorded_wait(self, name: str) -> WaitResult:
        outcome = self._substitute(name, self._next(), StageKind.WAIT, "not waited")
        try:
            return result_of(outcome)
        except InvalidArgument:
            raise InvalidArgument(f"the recorded run has no finished wait {name!r} here") from None

    def unreached(self) -> list[Stage]:
        """Recorded stages the replayed handler never asked for."""
        reached = {stage.position for stage in self._report.stages}
        return [
            stage for position, stage in sorted(self._recorded.items()) if position not in reached
        ]

    def _next(self) -> Stage | None:
        position = self._position
        self._position += 1
        return self._recorded.get(position)

    def _compare(self, name: str, recorded: Stage | None, result: Any) -> Any:
        replayed = json.loads(_canonical(result))
        kind = StageKind.STEP
        note = _placement(name, kind, recorded)
        old = recorded.result if recorded is not None and not note else None
        changed = bool(note) or _canonical(old) != _canonical(replayed)
        self._diff(name, kind, old, replayed, changed, note)
        return replayed

    def _substitute(
        self,
        name: str,
        recorded: Stage | None,
        kind: StageKind = StageKind.EFFECT,
        instead: str = "effect not run",
    ) -> Any:
        note = _placement(name, kind, recorded)
        value = recorded.result if recorded is not None and not note else None
        self._diff(
            name, kind, value, value, bool(note), note or f"{instead}: the recorded result was used"
        )
        return value

    def _diff(
        self, name: str, kind: StageKind, recorded: Any, replayed: Any, changed: bool, note: str
    ) -> None:
        """The report's line for the stage just taken."""
        position = self._position - 1
        self._report.stages.append(
            StageDiff(position, name, kind.value, recorded, replayed, changed, note)
        )


def _placement(name: str, kind: StageKind, recorded: Stage | None) -> str:
    """Why this stage has no recorded counterpart, or '' when it has one."""
    if recorded is None:
        return "new: the recorded run had no stage here"
    if (recorded.name, recorded.kind) != (name, kind):
        return f"changed: the recorded run had {recorded.kind.value} {recorded.name!r} here"
    if recorded.status is not StageStatus.DONE:
        return f"the recorded stage never finished ({recorded.status.value})"
    return ""


def replay(ledger: Ledger, job_id: str, app: App) -> ReplayReport:
    """Replay a finished job through `app`'s handler for its kind (see the module docstring)."""
    job = ledger.get(job_id)
    if not job.state.terminal:
        raise InvalidArgument(f"job {job_id} is {job.state.value}: only a finished job replays")
    job_class = app.job_classes.get(job.kind)
    if job_class is None:
        raise InvalidArgument(f"the app has no job class for kind {job.kind!r}")
    recorded = ledger.stages(job_id)
    report = ReplayReport(job.id, job.kind, job_class.version, recorded_result=job.result)
    ctx = ReplayContext(job, recorded, report)
    try:
        outcome = job_class.handler(ctx, job_class.handler_payload(job.payload))
        if inspect.isawaitable(outcome):
            outcome = asyncio.run(_await(outcome))
        outcome = job_class.stored_result(outcome)
        report.replayed_result = json.loads(_canonical(outcome))
        report.result_differs = _canonical(report.replayed_result) != _canonical(job.result)
    except Exception as exc:  # the replayed handler's failure is part of the report
        report.error = f"{type(exc).__name__}: {exc}"
        report.result_differs = True
    for stage in ctx.unreached():
        report.stages.append(
            StageDiff(
                stage.position,
                stage.name,
                stage.kind.value,
                stage.result,
                None,
                True,
                "gone: the replayed handler did not reach this stage",
            )
        )
    return report


async def _await(awaitable: Any) -> Any:
    return await awaitable
