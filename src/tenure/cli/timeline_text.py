"""`tenure events ID --timeline`: a job's lease timeline drawn as text for a terminal.

One bar per claim over a common time axis (`=` the lease while its holder was heard from, `~`
after its last known heartbeat until it expired, `!` where something was refused or rejected,
`|` a database failover), then the lane's stages, effects and marks with their times from the
job's submit, by the database's clock. ASCII only; ids, tokens and names, never content.
"""

from __future__ import annotations

from datetime import datetime

from tenure.timeline import Lane, LaneEnd, Mark, SpanStatus, Timeline

WIDTH = 64
_ALARMS = {"result_rejected", "heartbeat_lost", "effect_refused", "ownership_unknown"}


def duration(seconds: float) -> str:
    """A length of time, readable for 3 ms and for 3 days."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.3f} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    if seconds < 172800:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    return f"{int(seconds // 86400)} d {int(seconds % 86400 // 3600)} h"


def offset(seconds: float) -> str:
    """A time from the job's submit."""
    return "+" + duration(seconds)


class _Axis:
    def __init__(self, start: datetime, end: datetime) -> None:
        self.start = start
        self.span = max((end - start).total_seconds(), 1e-6)

    def seconds(self, at: datetime) -> float:
        return (at - self.start).total_seconds()

    def column(self, at: datetime) -> int:
        return min(WIDTH - 1, max(0, int(self.seconds(at) / self.span * (WIDTH - 1))))

    def when(self, at: datetime) -> str:
        return offset(max(0.0, self.seconds(at)))


def render_timeline(timeline: Timeline) -> list[str]:
    """The lines of the drawing."""
    job = timeline.job
    axis = _Axis(timeline.start, timeline.end)
    lines = [
        f"job {job.id} ({job.kind}, {job.state.value}): {len(timeline.lanes)} claim(s), "
        f"{len(timeline.waits)} wait(s), {len(timeline.rules)} failover(s)",
        "times from its submit, by the database's clock",
        f"  {'0':<{WIDTH // 2}}{axis.when(timeline.end):>{WIDTH - WIDTH // 2}}",
    ]
    for mark in timeline.marks:
        lines.append(f"  {axis.when(mark.at):>14}  {mark.type.value}{_fields(mark)}")
    for number, lane in enumerate(timeline.lanes, start=1):
        lines += _lane(number, lane, timeline, axis)
    if timeline.waits or timeline.rules:
        lines.append("")
    for wait in timeline.waits:
        until = axis.when(wait.ended_at) if wait.ended_at else "still waiting"
        what = wait.waited_for or "?"
        named = f" {wait.name}" if wait.name else ""
        lines.append(f"  wait for {what}{named}: {axis.when(wait.started_at)} to {until}, no lease")
    for rule in timeline.rules:
        lines.append(
            f"  | failover at {axis.when(rule.at)}: "
            f"timeline {rule.from_timeline} -> {rule.to_timeline}"
        )
    return lines


def _lane(number: int, lane: Lane, timeline: Timeline, axis: _Axis) -> list[str]:
    ended = lane.ended_at or timeline.now
    attempt = f"  attempt {lane.attempt}" if lane.attempt is not None else ""
    how = lane.ended_by.value
    rows = [
        "",
        f"lane {number}  token {lane.token}  owner {lane.owner or '-'}{attempt}",
        f"  [{_bar(lane, ended, timeline, axis)}] {how}",
        f"  {axis.when(lane.claimed_at):>14}  claimed"
        + (f" (lease until {axis.when(lane.lease_until)})" if lane.lease_until else ""),
    ]
    events: list[tuple[datetime, str]] = []
    for stage in lane.stages:
        took = ""
        if stage.ended_at is not None:
            took = f" in {duration((stage.ended_at - stage.started_at).total_seconds())}"
        doubt = (
            f" (found in doubt, started by {stage.in_doubt_from})" if stage.in_doubt_from else ""
        )
        status = stage.status.value.replace("_", " ")
        events.append((stage.started_at, f"{stage.kind.value} {stage.name}: {status}{took}{doubt}"))
    for effect in lane.effects:
        events.append((effect.started_at, f"  sent with fence {effect.fence}, key {effect.key}"))
    for mark in lane.marks:
        alarm = "! " if mark.type.value in _ALARMS else ""
        events.append((mark.at, f"{alarm}{mark.type.value}{_fields(mark)}"))
    for beat in lane.renewals:
        events.append((beat, "renewed (the last heartbeat the database kept)"))
    if lane.ended_at is not None and lane.ended_by is not LaneEnd.RUNNING:
        events.append((lane.ended_at, f"lease ended: {how}"))
    events.sort(key=lambda item: item[0])
    rows += [f"  {axis.when(at):>14}  {text}" for at, text in events]
    return rows


def _bar(lane: Lane, ended: datetime, timeline: Timeline, axis: _Axis) -> str:
    cells = [" "] * WIDTH
    first, last = axis.column(lane.claimed_at), axis.column(ended)
    heard = axis.column(lane.last_heard_at) if lane.last_heard_at else first
    silent_from = heard if lane.ended_by is LaneEnd.EXPIRED else last
    for column in range(first, last + 1):
        cells[column] = "=" if column <= silent_from else "~"
    for span in lane.stages:
        if span.status is SpanStatus.IN_DOUBT:
            cells[axis.column(span.started_at)] = "?"
    for mark in lane.marks:
        if mark.type.value in _ALARMS:
            cells[axis.column(mark.at)] = "!"
    for rule in timeline.rules:
        cells[axis.column(rule.at)] = "|"
    return "".join(cells)


def _fields(mark: Mark) -> str:
    shown = " ".join(f"{key}={value}" for key, value in sorted(mark.detail.items()))
    return f"  {shown}" if shown else ""
