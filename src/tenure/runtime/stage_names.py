"""What a handler's spawns and waits are called: shared by the worker's `JobContext` and
`tenure replay`'s context, so that a replay finds every stage under the name the run recorded
it."""

from __future__ import annotations

import json
import threading


class StageNames:
    """Stage names of spawns and waits, numbered per family in handler order (the same on
    every attempt and in a replay, as long as the handler keeps its order)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def _next(self, family: str) -> int:
        with self._lock:
            self._counts[family] = self._counts.get(family, 0) + 1
            return self._counts[family]

    def spawn(self, kind: str, name: str | None) -> tuple[str, str]:
        """(the child's name, its stage's name): `kind#n` unless named."""
        child = name or f"{kind}#{self._next('spawn:' + kind)}"
        return child, f"spawn:{child}"

    @staticmethod
    def signal(name: str) -> str:
        return f"signal:{name}"

    @staticmethod
    def signals(names: tuple[str, ...]) -> str:
        # JSON, not a join: a signal name may hold a comma.
        return "signals:" + json.dumps(list(names), ensure_ascii=False)

    def wait_job(self) -> str:
        return f"wait_job#{self._next('wait_job')}"

    def sleep(self) -> str:
        return f"sleep#{self._next('sleep')}"
