"""Where the demo's jobs live, so that a database given with `--db` keeps none of them.

Without `--db`: a new SQLite file in the demo's workspace, which goes with it. On PostgreSQL: a
schema of the demo's own in the given database, made at the start and dropped at the end (its
workers see none of the database's jobs). On a SQLite file: a kind of the run's own (its
workers claim none of the file's jobs) whose jobs are deleted at the end; or the file itself,
when the demo made it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from tenure.errors import TenureError
from tenure.storage import SQLITE_PREFIX, check_url
from tenure.storage.postgres.schemas import create_schema, drop_schema, in_schema
from tenure.storage.postgres.urls import describe
from tenure.storage.sqlite.forget import forget_kind
from tenure.storage.sqlite.store import path_from_url

KIND = "invoice"
# A SQLite database file and what SQLite and tenure put beside it.
SQLITE_FILES = ("", "-wal", "-shm", "-journal", "-turn")


@dataclass
class DemoDatabase:
    """The database the demo and its workers use (`url`), its jobs' kind, and how it goes."""

    given: str | None
    url: str = ""
    kind: str = KIND
    schema: str | None = None
    made_files: list[Path] = field(default_factory=list)
    keep: bool = False  # `--keep`: what the demo made in the given database stays, for a look
    left: str | None = None  # what `remove` left in the given database, and how to remove it

    @classmethod
    def of(cls, given: str | None, *, keep: bool = False) -> DemoDatabase:
        """Refuse a URL tenure cannot use (`UnsupportedDatabase`) before anything is made."""
        if given is not None:
            check_url(given)
        return cls(given, keep=keep)

    def open(self, folder: Path) -> None:
        """Make what the demo runs in (on PostgreSQL, its schema)."""
        if self.given is None:
            self.url = f"sqlite:///{folder / 'tenure.db'}"
        elif self.given.startswith(SQLITE_PREFIX):
            path = path_from_url(self.given)
            if not Path(path).exists():
                candidates = (Path(path + suffix) for suffix in SQLITE_FILES)
                self.made_files = [file for file in candidates if not file.exists()]
            else:
                self.kind = f"{KIND}.demo-{secrets.token_hex(4)}"
            self.url = self.given
        else:
            # Named before it is made: an interrupted CREATE is dropped all the same.
            self.schema = f"tenure_demo_{secrets.token_hex(6)}"
            try:
                create_schema(self.given, self.schema)
            except TenureError:
                self.schema = None  # the CREATE failed: nothing of the demo's is there
                raise
            self.url = in_schema(self.given, self.schema)

    @property
    def shown(self) -> str:
        """What the demo's first line says of its database."""
        if self.given is None or not self.url:
            return self.url
        if self.schema is not None:
            said = f"{describe(self.given)}, schema {self.schema}"
            return said if self.keep else f"{said} (dropped at the end)"
        if self.made_files:
            return f"{self.given} (a new file{'' if self.keep else ', removed at the end'})"
        said = f"{self.given}, jobs of kind {self.kind}"
        return said if self.keep else f"{said} (deleted at the end)"

    def remove(self) -> None:
        """Take the demo's jobs out of the given database (unless `keep`), once no worker of
        the demo is left; what stays in it, and how to remove it, goes to `left`."""
        if self.keep:
            self.left = self._kept()
            return
        try:
            if self.schema is not None and self.given is not None:
                drop_schema(self.given, self.schema)
            elif self.made_files:
                for file in self.made_files:
                    file.unlink(missing_ok=True)
            elif self.kind != KIND:
                forget_kind(self.url, self.kind)
        except (TenureError, OSError) as exc:
            self.left = f"{self._kept()} (removing it failed: {exc})"

    def _kept(self) -> str | None:
        if self.schema is not None:
            return (
                f"kept schema {self.schema}: its jobs are seen with options=-csearch_path%3D"
                f"{self.schema} in the URL; DROP SCHEMA {self.schema} CASCADE removes it"
            )
        if self.made_files:
            return f"kept {self.made_files[0]}"
        if self.given is not None and self.kind != KIND:
            return f"kept the demo's jobs (kind {self.kind}) in {path_from_url(self.given)}"
        return None
