"""The claim statement's parameters, and where a claimer's next plain claim starts in the
queue: below its floor, its last claims left nothing claimable.

While a transaction elsewhere holds the MVCC horizon, every job claimed since keeps a dead
version in the index of queued jobs, at its head (the oldest submissions). A claim that starts
at the head steps over each of them, and pays more the longer the horizon is held. A claim that
took fewer jobs than it asked for took every claimable queued job it could see: the next one
can start after the last it took (`seq >= floor`, a condition the index answers without reading
the dead versions). A claim that came back full (a deep queue) took the first jobs in the
queue's order: the next one starts at that position (a `Floor` with a priority). What a floor
skips (a retry, a release or a requeue keeps its place in the queue; a job due later than it
was submitted; a submit that committed after a later one) is taken by a rescue claim, which
starts at the head: a worker's own once a second, or, for the workers of a fleet that take
turns, the one whose claim takes the turn (a turn lasts RESCUE_TURN_SECONDS, less if it found
something to do).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, LiteralString

from tenure.storage.base import NOTHING_TO_PUBLISH, ClaimRequest, Publish
from tenure.storage.queries import load_queries
from tenure.storage.rows import Row
from tenure.storage.seam import Params

# A process has a few claimers (one per worker and lease group); forget them all past this.
_MOST_CLAIMERS = 1024
# How long a shared search for expired leases holds its claimers' turn: shorter than the second
# between a worker's rescue claims (tenure.runtime.worker.RESCUE_INTERVAL), so that a worker
# alone, or a fleet whose rescues fall in step, finds its turn due each time it asks.
RESCUE_TURN_SECONDS = 0.8

_Claimer = tuple[str, tuple[str, ...] | None, tuple[str, ...]]


@dataclass(frozen=True)
class Floor:
    """Where a claimer's next plain claim starts. `priority` None: after a claim short of its
    limit, every claimable queued job below `seq` was taken, of every priority. Otherwise a
    position in the queue's order (priority DESC, seq) after a full claim: the jobs of higher
    priority are read from the head (what came since), those of `priority` from `seq` on,
    those of lower priority from the head; each range is where the index starts reading."""

    seq: int
    priority: int | None = None


HEAD = Floor(0)


def starts_at_head(request: ClaimRequest) -> bool:
    """A limited claim (its jobs chosen) and a rescue that does not take turns read the queue
    from its head; every other claim passes its claimer's floor."""
    return request.only_ids is not None or (request.rescue and not request.rescue_shared)


class ClaimFloors:
    """The floor of each claimer (owner, kinds, variants) of one store; thread-safe."""

    def __init__(self) -> None:
        self._floors: dict[_Claimer, Floor] = {}
        self._lock = threading.Lock()

    def floor(self, request: ClaimRequest) -> Floor:
        """Where this claim starts: the head for a limited claim or a rescue of its own; a
        shared rescue passes its floor, and the statement reads from the head only if the
        claim takes its turn to search."""
        if starts_at_head(request):
            return HEAD
        with self._lock:
            return self._floors.get(_claimer(request), HEAD)

    def claimed(self, request: ClaimRequest, count: int, queued: Sequence[tuple[int, int]]) -> None:
        """After a claim of `count` jobs, `queued` (priority, seq) of them from the queue: a
        claim short of its limit saw every claimable queued job, so the next starts after the
        last of them; a full one (a deep queue) holds a position: after the last job it took
        in the queue's order, the lowest priority it reached and the highest seq there."""
        if request.only_ids is not None or not queued:
            return
        key = _claimer(request)
        if count >= request.limit:
            lowest = min(priority for priority, _ in queued)
            last = max(seq for priority, seq in queued if priority == lowest)
            floor = Floor(last + 1, lowest)
        else:
            floor = Floor(max(seq for _, seq in queued) + 1)
        with self._lock:
            if key not in self._floors and len(self._floors) >= _MOST_CLAIMERS:
                self._floors.clear()
            before = self._floors.get(key, HEAD)
            if floor.priority is None and before.priority is None:
                floor = Floor(max(before.seq, floor.seq))
            self._floors[key] = floor

    def requeued(self, back: bool) -> bool:
        """`back`: a job went back to the queue at its old place (a retry, a release, a
        requeue, a budget's hold let go) through this store, and every claimer's next claim
        starts at the head, where it is (other processes' claimers find it at their next
        rescue that reads the head: a shared one on its turn). Returns `back`."""
        if back:
            with self._lock:
                self._floors.clear()
        return back


class RescueTurns:
    """The turns of a store's shared rescues (tenure_rescue_turns, schema version 22): the turn
    a claim takes, its row written (autocommit, `write`) before the first claim that takes
    it. A claim whose turn has no row searches whenever it is asked to (the statement checks),
    so a row lost to a restore costs turns, not rescues."""

    def __init__(self, write: Callable[[str, Params], Sequence[Row]]) -> None:
        self._write = write
        self._opened: set[str] = set()
        self._lock = threading.Lock()

    def turn_of(self, request: ClaimRequest) -> str | None:
        """The turn a shared rescue takes: a digest of its kinds and variants (None: the claim
        does not search, or searches whenever asked)."""
        if not (request.rescue and request.rescue_shared):
            return None
        kinds = None if request.kinds is None else sorted(request.kinds)
        named = json.dumps([kinds, sorted(request.pinned)], separators=(",", ":"))
        turn = hashlib.sha256(named.encode()).hexdigest()[:32]
        with self._lock:
            if turn in self._opened:
                return turn
        self._write("exchange__rescue_turn", {"claimer": turn})
        with self._lock:
            if len(self._opened) >= _MOST_CLAIMERS:
                self._opened.clear()
            self._opened.add(turn)
        return turn


def _claimer(request: ClaimRequest) -> _Claimer:
    kinds = None if request.kinds is None else tuple(sorted(request.kinds))
    return (request.owner_id, kinds, tuple(request.pinned))


# The claim in three statements. From the head, without the floor's condition: the planner
# reads a deep queue in its index's order and stops at the limit. From a floor (`seq >=
# floor`, on the second column of the index (priority DESC, seq)): it may read and sort every
# queued row above it (measured: a drain of 20,000 jobs at 3,400 jobs/s instead of 7,800), so
# that statement serves only claims after a short one, when few rows are queued. From a
# position: three ranges of that index, each bounded on its first column (the range at the
# position's priority on seq too), read in order, each up to what the ones before it left.
FLOOR_CONDITION = "      AND j.seq >= (SELECT from_seq FROM from_floor)\n"
_CANDIDATE = "queued_candidate AS (\n"
_LIMIT = "    LIMIT %(limit)s\n"
_RANGES = {
    "queued_above": "      AND j.priority > %(floor_priority)s::int\n",
    "queued_at": "      AND j.priority = %(floor_priority)s::int\n" + FLOOR_CONDITION,
    "queued_below": "      AND j.priority < %(floor_priority)s::int\n",
}


def with_claim_variants(queries: dict[str, LiteralString]) -> dict[str, LiteralString]:
    """The named queries with `exchange_from_head` (the claim without its floor condition) and
    `exchange_from_position` (the queue read in three ranges around a position)."""
    exchange = queries["exchange"]
    if exchange.count(_CANDIDATE) != 1:
        raise RuntimeError("the claim statement lost its queued candidates")
    start = exchange.index(_CANDIDATE) + len(_CANDIDATE)
    end = exchange.index("\n),\n", start)
    body = exchange[start:end]
    if body.count(FLOOR_CONDITION) != 1 or body.count(_LIMIT) != 1:
        raise RuntimeError("the claim statement's queued candidates lost their floor or limit")
    # Each range takes what the ranges before it (higher in the queue's order) left of the
    # limit: every row a range locks is one the claim takes.
    ranges, taken = [], ""
    for name, condition in _RANGES.items():
        limit = f"    LIMIT %(limit)s{taken}\n"
        ranges.append(
            f"{name} AS (\n{body.replace(FLOOR_CONDITION, condition).replace(_LIMIT, limit)}\n),\n"
        )
        taken += f" - (SELECT count(*) FROM {name})"
    union = " UNION ALL ".join(f"SELECT * FROM {name}" for name in _RANGES)
    candidate = f"{''.join(ranges)}{_CANDIDATE}    {union}"
    from_position = exchange[: start - len(_CANDIDATE)] + candidate + exchange[end:]
    return queries | {
        "exchange_from_head": exchange.replace(FLOOR_CONDITION, ""),
        "exchange_from_position": from_position,
    }


def claim_statement(floor: Floor) -> str:
    """The claim from the claimer's floor, its position, or the head of the queue."""
    if floor.priority is not None:
        return "exchange_from_position"
    return "exchange" if floor.seq else "exchange_from_head"


def exchange_params(
    publish: Publish, request: ClaimRequest, floor: Floor, rescue_turn: str | None = None
) -> dict[str, Any]:
    """The claim statement's parameters: results to publish, the claim, where it starts, and
    the turn its search for expired leases takes (None: it searches if it rescues)."""
    return {
        "seq_from": floor.seq,
        "floor_priority": floor.priority,
        "job_ids": [lease.job_id for lease in publish.leases],
        "given": _results_map(publish),
        "owner_id": request.owner_id,
        "kinds": None if request.kinds is None else list(request.kinds),
        "lease_seconds": request.lease_seconds,
        "limit": request.limit,
        "only_ids": None if request.only_ids is None else list(request.only_ids),
        "pinned": list(request.pinned),
        "pinned_kinds": request.pinned_kinds,
        "rescue": request.rescue,
        "rescue_turn": rescue_turn,
        "rescue_every": RESCUE_TURN_SECONDS,
    }


def _results_map(publish: Publish) -> str:
    """{"<job id>": {"o": owner, "t": token, "r": result, "d": detail}} as JSON text; the
    result and detail texts are canonical JSON already and go in as they are."""
    entries = (
        f'"{lease.job_id}":{{"o":{json.dumps(lease.owner_id)},"t":{lease.token},'
        f'"r":{result},"d":{detail}}}'
        for lease, result, detail in zip(
            publish.leases, publish.results_json, publish.details_json, strict=True
        )
    )
    return "{" + ",".join(entries) + "}"


def claim_explained(
    kinds: Sequence[str],
    floor: int,
    rescue: bool,
    priority: int | None = None,
    turn: str | None = None,
) -> tuple[LiteralString, dict[str, Any]]:
    """The statement and parameters of a worker's claim of 16 jobs of `kinds` from `floor`
    (0: from the head; with `priority`, the position a full claim left), as the store sends
    it: for EXPLAIN in the benchmark and the tests. A rescue with a `turn` is a shared one (it
    passes its floor, and searches only if it takes that turn's row); without, it starts at the
    head."""
    queries = with_claim_variants(load_queries(__package__ or "tenure.storage.postgres"))
    request = ClaimRequest(
        owner_id="explain",
        kinds=list(kinds),
        lease_seconds=30.0,
        limit=16,
        rescue=rescue,
        rescue_shared=turn is not None,
    )
    start = HEAD if starts_at_head(request) else Floor(floor, priority)
    return queries[claim_statement(start)], exchange_params(
        NOTHING_TO_PUBLISH, request, start, turn
    )
