"""Whether a SQLite file has room to be written: a write refused for want of space is
remembered until one succeeds or space is freed, and the disk's free space is read, so that
`/readyz` can say that a database which still answers reads refuses writes."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SQLITE_FULL = 13
# Under this much free space a write is likely refused: a checkpoint needs room to move the
# WAL into the file. Freeing this much past a refusal counts as room again.
LOW_DISK_BYTES = 256 * 1024


class WriteRoom:
    """The room left on the disk that holds one SQLite file."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._refused: tuple[str, int | None] | None = None

    @contextmanager
    def noting(self) -> Iterator[None]:
        """Around a write transaction: remember a refusal for want of space."""
        try:
            yield
        except sqlite3.Error as exc:
            code = getattr(exc, "sqlite_errorcode", None)
            if code is not None and code & 0xFF == _SQLITE_FULL:
                self._refused = (f"the last write was refused: {exc}", self.free_bytes())
            raise
        self._refused = None

    def free_bytes(self) -> int | None:
        try:
            stat = os.statvfs(Path(self._path).parent)
        except OSError:
            return None
        return stat.f_bavail * stat.f_frsize

    def refusal(self) -> str | None:
        """Why writes fail now, or None when they should succeed."""
        free = self.free_bytes()
        if self._refused is not None:
            message, free_then = self._refused
            if free is None or free_then is None or free < free_then + LOW_DISK_BYTES:
                return message
            self._refused = None
        if free is not None and free < LOW_DISK_BYTES:
            return f"the disk holding {self._path} has {free} bytes free"
        return None
