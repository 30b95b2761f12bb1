"""The run tree a job belongs to: its root ancestor, and every child and grandchild below.

Drawn by the dashboard's job page and given by `GET /v1/jobs/{id}/tree`
(docs/how-to/timeline.md). Read through a `TreeSource` (a `Ledger` is one), bounded in depth
and size so that a runaway fan-out cannot make one page read the whole table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tenure.errors import JobNotFound
from tenure.types import Job
from tenure.wait_state import WaitState

MAX_DEPTH = 6
MAX_NODES = 500


class TreeSource(Protocol):
    """What reading a tree needs of the ledger."""

    def get(self, job_id: str) -> Job: ...

    def children(self, job_id: str) -> list[Job]: ...

    def job_cost(self, job_id: str) -> tuple[int, float]: ...


@dataclass(slots=True)
class RunNode:
    """One job of the tree with what it spent and its children."""

    job: Job
    cost: tuple[int, float] | None
    children: list[RunNode] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        job = self.job
        tokens, usd = self.cost if self.cost is not None else (0, 0.0)
        return {
            "id": job.id,
            "kind": job.kind,
            "state": job.state.value,
            "token": job.token,
            "attempt": job.attempt,
            "max_attempts": job.max_attempts,
            "principal": job.principal,
            "wait": _wait_shown(job.wait),
            "cost": None if self.cost is None else {"tokens": tokens, "usd": usd},
            "created_at": job.created_at.isoformat(),
            "updated_at": job.updated_at.isoformat(),
            "children": [child.to_dict() for child in self.children],
        }


@dataclass(frozen=True, slots=True)
class RunTree:
    """The tree from its root, the job it was asked for, and whether limits cut it."""

    root: RunNode
    focus: str
    truncated: bool

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root.to_dict(), "focus": self.focus, "truncated": self.truncated}


def _wait_shown(wait: WaitState | None) -> dict[str, Any] | None:
    """What a job waits for: kind, signal name, child ids, deadline; never a question's words."""
    if wait is None:
        return None
    shown = ("for", "name", "names", "pending", "jobs", "until", "position")
    return {key: wait.document[key] for key in shown if key in wait.document}


def read_tree(
    source: TreeSource,
    job_id: str,
    *,
    visible: Callable[[Job], bool] = lambda job: True,
    max_depth: int = MAX_DEPTH,
    max_nodes: int = MAX_NODES,
) -> RunTree:
    """The tree of `job_id`: up to its highest visible ancestor, then down breadth first, at
    most `max_depth` levels below the root and `max_nodes` jobs in all."""
    focus = source.get(job_id)
    root = focus
    for _ in range(max_depth):
        if root.parent_id is None:
            break
        parent = _found(source, root.parent_id)
        if parent is None or not visible(parent):
            break
        root = parent
    top = RunNode(root, _cost(source, root.id))
    level, count, truncated = [top], 1, False
    for _ in range(max_depth):
        below: list[RunNode] = []
        for node in level:
            for child in source.children(node.job.id):
                if count >= max_nodes:
                    truncated = True
                    break
                if visible(child):
                    kid = RunNode(child, _cost(source, child.id))
                    node.children.append(kid)
                    below.append(kid)
                    count += 1
        level = below
    truncated = truncated or any(source.children(node.job.id) for node in level)
    return RunTree(top, focus.id, truncated)


def _found(source: TreeSource, job_id: str) -> Job | None:
    try:
        return source.get(job_id)
    except JobNotFound:
        return None


def _cost(source: TreeSource, job_id: str) -> tuple[int, float] | None:
    tokens, usd = source.job_cost(job_id)
    return (tokens, usd) if tokens or usd else None
