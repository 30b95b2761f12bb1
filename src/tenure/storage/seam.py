"""What the aggregates written once for both SQL dialects (`sql_evidence`, `sql_schedules`)
ask of `SqlStore`'s dialect seam."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from tenure.storage.rows import Decoder, Row


class SqlSeam(ABC):
    decode: Decoder

    @abstractmethod
    def _read_rows(self, name: str, params: Mapping[str, Any] | None = None) -> Sequence[Row]:
        """Run a named read query on its own."""

    @abstractmethod
    def _write_rows(self, name: str, params: Mapping[str, Any] | None = None) -> Sequence[Row]:
        """Run a named one-statement write in its own transaction."""
