"""A real PgBouncer in transaction mode in front of a PostgreSQL, for the `pooler` tests and the
fleet benchmark: PgBouncer's defaults except the pool mode (and `auth_type = any`, so that no
password file is needed on loopback), run from the machine's `pgbouncer` (Debian: `apt-get
install pgbouncer`)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import TenureError
from tenure.storage.postgres.urls import parse_url
from tenure.testing.pair import free_port

_USERS = ("postgres", "nobody")


class PoolerError(TenureError):
    """PgBouncer could not be started: the harness's trouble, not tenure's."""


def find_pgbouncer() -> str:
    """The pgbouncer binary on PATH or in /usr/sbin (Debian's package puts it there)."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if not found:
        raise PoolerError("no pgbouncer binary: install it (apt-get install pgbouncer)")
    return found


class PgBouncer:
    """`pgbouncer` on a free loopback port forwarding every database to `upstream_url`'s
    server, as `upstream_url`'s user, pooling per transaction. `settings` are more lines of
    its `[pgbouncer]` section (`max_client_conn`, `default_pool_size`, …). `clock` times the
    wait for it to listen."""

    def __init__(
        self,
        upstream_url: str,
        *,
        pool_mode: str = "transaction",
        settings: Mapping[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        self.binary = find_pgbouncer()
        params = parse_url(upstream_url)
        self.user = str(params.get("user") or "postgres")
        self.dbname = str(params.get("dbname") or self.user)
        host = str(params.get("host") or "127.0.0.1")
        upstream_port = int(params.get("port") or 5432)
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="tenure-pgbouncer-"))
        self.log = self.folder / "pgbouncer.log"
        self._run_as = _unprivileged_user(host)
        (self.folder / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={host} port={upstream_port} user={self.user}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = any\n"
            f"pool_mode = {pool_mode}\n"
            f"logfile = {self.log}\n"
            f"pidfile = {self.folder / 'pgbouncer.pid'}\n"
            + "".join(f"{name} = {value}\n" for name, value in (settings or {}).items()),
            encoding="utf-8",
        )
        if self._run_as is not None:
            entry = pwd.getpwnam(self._run_as)
            for path in (self.folder, self.folder / "pgbouncer.ini"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, dbname: str | None = None, *, query: str = "") -> str:
        """A URL that reaches the upstream's database `dbname` through PgBouncer."""
        base = (
            f"postgresql://{quote(self.user)}@127.0.0.1:{self.port}/{quote(dbname or self.dbname)}"
        )
        return f"{base}?{query}" if query else base

    def start(self, timeout: float = 15.0) -> None:
        """Start PgBouncer and wait until its port takes connections."""
        self._process = subprocess.Popen(
            [self.binary, str(self.folder / "pgbouncer.ini")],
            user=self._run_as,
            cwd=self.folder,
            # Its log goes to the logfile as well; a pipe nobody reads would fill and stall it.
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = self.clock.monotonic() + timeout
        while self.clock.monotonic() < deadline:
            if self._process.poll() is not None:
                raise PoolerError(f"pgbouncer exited ({self._process.returncode}): {self._tail()}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            self.clock.sleep(0.02)
        self.stop()
        raise PoolerError(f"pgbouncer did not listen within {timeout:g}s: {self._tail()}")

    def stop(self) -> None:
        """Stop PgBouncer at once (SIGTERM) and remove its folder."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(encoding="utf-8", errors="replace")[-2000:]
        return ""

    def __enter__(self) -> PgBouncer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _unprivileged_user(host: str) -> str | None:
    """PgBouncer refuses to run as root: a system user to run it as (None: us). Upstream on a
    Unix socket: the owner of its folder (the server's user), who can reach it."""
    if os.geteuid() != 0:
        return None
    if host.startswith("/"):
        with contextlib.suppress(OSError, KeyError):
            owner = os.stat(host).st_uid
            if owner != 0:
                return pwd.getpwuid(owner).pw_name
    for name in _USERS:
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise PoolerError("running as root and no postgres or nobody user to run pgbouncer as")
