"""What the aggregates written once for both SQL dialects (`sql_evidence`, `sql_schedules`,
`sql_budgets`) ask of `SqlStore`'s dialect seam, and the open transaction it hands them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from tenure.storage.rows import Decoder, Row

Params = Mapping[str, Any]


class Tx(Protocol):
    """Named queries inside one open transaction."""

    def rows(self, name: str, params: Params | None = None) -> Sequence[Row]:
        """Run the named query; its rows (none for a statement that returns nothing)."""
        ...


class SqlSeam(ABC):
    decode: Decoder

    @abstractmethod
    def _read_rows(self, name: str, params: Mapping[str, Any] | None = None) -> Sequence[Row]:
        """Run a named read query on its own."""

    @abstractmethod
    def _write_rows(self, name: str, params: Mapping[str, Any] | None = None) -> Sequence[Row]:
        """Run a named one-statement write in its own transaction."""
