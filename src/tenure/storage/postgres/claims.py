"""The claim statement's parameters, and where a claimer's next plain claim starts in the
queue: below its floor, its last claims left nothing claimable.

While a transaction elsewhere holds the MVCC horizon, every job claimed since keeps a dead
version in the index of queued jobs, at its head (the oldest submissions). A claim that starts
at the head steps over each of them, and pays more the longer the horizon is held. A claim that
took fewer jobs than it asked for took every claimable queued job it could see: the next one
can start after the last it took (`seq >= floor`, a condition the index answers without reading
the dead versions). What the floor skips (a retry, a release or a requeue keeps its place in
the queue; a job due later than it was submitted; a submit that committed after a later one)
is taken by the worker's rescue claim, which starts at the head, once a second.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
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


class ClaimFloors:
    """The floor of each claimer (owner, kinds, variants) of one store; thread-safe."""

    def __init__(self) -> None:
        self._floors: dict[_Claimer, int] = {}
        self._lock = threading.Lock()

    def floor(self, request: ClaimRequest) -> int:
        """Where this claim starts: the head for a rescue or a limited claim."""
        if request.rescue or request.only_ids is not None:
            return 0
        with self._lock:
            return self._floors.get(_claimer(request), 0)

    def claimed(self, request: ClaimRequest, count: int, queued_seqs: Sequence[int]) -> None:
        """After a claim of `count` jobs, `queued_seqs` of them from the queue: a claim short
        of its limit saw every claimable queued job, so the next starts after the last; a full
        one (a deep queue) drops the floor, and the next starts at the head again, where the
        planner reads the index in order and stops at the limit."""
        if request.only_ids is not None:
            return
        key = _claimer(request)
        if count >= request.limit:
            with self._lock:
                self._floors.pop(key, None)
            return
        if not queued_seqs:
            return
        with self._lock:
            if key not in self._floors and len(self._floors) >= _MOST_CLAIMERS:
                self._floors.clear()
            self._floors[key] = max(self._floors.get(key, 0), max(queued_seqs) + 1)


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


# The claim from the head of the queue, as a separate statement: without the floor's condition,
# whose value a generic plan does not know, the planner reads a deep queue in its index's
# order and stops at the limit; with it, it may read and sort every queued row (measured: a
# drain of 20,000 jobs at 3,400 jobs/s instead of 7,800). A floor is held only while claims
# come back short, when few rows are queued (ClaimFloors, above).
FLOOR_CONDITION = "      AND j.seq >= %(seq_from)s::bigint\n"


def with_claim_from_head(queries: dict[str, LiteralString]) -> dict[str, LiteralString]:
    """The named queries with `exchange_from_head`: the claim without its floor condition."""
    if FLOOR_CONDITION not in queries["exchange"]:
        raise RuntimeError("the claim statement lost its floor condition")
    return queries | {"exchange_from_head": queries["exchange"].replace(FLOOR_CONDITION, "")}


def claim_statement(floor: int) -> str:
    """The claim from the claimer's floor, or from the head of the queue (no floor)."""
    return "exchange" if floor else "exchange_from_head"


def exchange_params(
    publish: Publish, request: ClaimRequest, seq_from: int, rescue_turn: str | None = None
) -> dict[str, Any]:
    """The claim statement's parameters: results to publish, the claim, where it starts, and
    the turn its search for expired leases takes (None: it searches if it rescues)."""
    return {
        "seq_from": seq_from,
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
    kinds: Sequence[str], floor: int, rescue: bool
) -> tuple[LiteralString, dict[str, Any]]:
    """The statement and parameters of a worker's claim of 16 jobs of `kinds` from `floor`
    (0: from the head), as the store sends it: for EXPLAIN in the benchmark and the tests."""
    queries = with_claim_from_head(load_queries(__package__ or "tenure.storage.postgres"))
    request = ClaimRequest(
        owner_id="explain", kinds=list(kinds), lease_seconds=30.0, limit=16, rescue=rescue
    )
    return queries[claim_statement(floor)], exchange_params(NOTHING_TO_PUBLISH, request, floor)
