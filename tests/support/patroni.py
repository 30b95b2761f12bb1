"""A Patroni cluster on loopback: one etcd (Debian's etcd-server) and three Patroni members
(Patroni from PyPI in a virtualenv of Debian's own python3, run as the server's user), each
with its PostgreSQL from `pg_config --bindir`. `.ci/run` installs both."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenure.testing.pair import find_bindir, free_port
from tests.support.waiting import poll

PATRONI_BIN = Path(os.environ.get("TENURE_TEST_PATRONI_BIN", "/opt/tenure-patroni/bin"))
SCOPE = "tenure-ha"


def missing_tools() -> str | None:
    """What the cluster needs that this machine lacks (None: all there)."""
    if shutil.which("etcd") is None:
        return "no etcd on PATH (Debian: apt-get install etcd-server)"
    if not (PATRONI_BIN / "patroni").exists():
        return f"no Patroni at {PATRONI_BIN} (see .ci/run)"
    return None


@dataclass
class Member:
    name: str
    pg_port: int
    api_port: int
    config: Path
    proc: subprocess.Popen[bytes] | None = None

    def status(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.api_port}/patroni", timeout=2
            ) as response:
                data: dict[str, Any] = json.loads(response.read())
                return data
        except (OSError, ValueError):
            return None


class PatroniCluster:
    """`with PatroniCluster() as cluster:` three members, synchronous mode, ready to use."""

    def __init__(self, members: int = 3) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="tenure-patroni-"))
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
        self.etcd_port, self.etcd_peer = free_port(), free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.members = [
            Member(f"m{i + 1}", free_port(), free_port(), self.folder / f"m{i + 1}.yml")
            for i in range(members)
        ]
        self.bindir = find_bindir()

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{m.pg_port}" for m in self.members)
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def __enter__(self) -> PatroniCluster:
        try:
            self._start_etcd()
            for member in self.members:
                self._write_config(member)
                self._start(member)
            poll(self._ready, 180, "a leader and two streaming replicas")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def leader(self) -> Member | None:
        for member in self.members:
            status = member.status()
            if status and status.get("role") == "primary" and status.get("state") == "running":
                return member
        return None

    def _ready(self) -> bool:
        statuses = [m.status() for m in self.members]
        roles = [s.get("role") for s in statuses if s]
        streaming = [
            s
            for s in statuses
            if s
            and s.get("role") == "replica"
            and s.get("replication_state") in ("streaming", None)
            and s.get("state") == "running"
        ]
        synced = [s for s in streaming if s.get("sync_standby")]
        return (
            roles.count("primary") == 1
            and len(streaming) == len(self.members) - 1
            and len(synced) == 1
        )

    def sync_standby(self) -> Member | None:
        """The replica that synchronous mode may promote."""
        for member in self.members:
            status = member.status()
            if status and status.get("role") == "replica" and status.get("sync_standby"):
                return member
        return None

    def switchover(self, candidate: Member) -> subprocess.CompletedProcess[str]:
        leader = self.leader()
        assert leader is not None
        return subprocess.run(
            [
                str(PATRONI_BIN / "patronictl"),
                "-c",
                str(leader.config),
                "switchover",
                "--leader",
                leader.name,
                "--candidate",
                candidate.name,
                "--force",
                SCOPE,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            user=self.user,
        )

    def kill_member(self, member: Member) -> None:
        """SIGKILL the member's Patroni and its postgres: the host is gone."""
        pid_file = self.folder / member.name / "postmaster.pid"
        postmaster = None
        with contextlib.suppress(OSError, ValueError):
            postmaster = int(pid_file.read_text().split("\n", 1)[0])
        if member.proc is not None:
            member.proc.kill()
            member.proc.wait(30)
        if postmaster is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(postmaster), signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGKILL)

    def close(self) -> None:
        for member in self.members:
            if member.proc is not None and member.proc.poll() is None:
                member.proc.terminate()
        for member in self.members:
            if member.proc is not None:
                try:
                    member.proc.wait(30)
                except subprocess.TimeoutExpired:
                    member.proc.kill()
            data = self.folder / member.name
            if (data / "postmaster.pid").exists():
                subprocess.run(
                    [str(self.bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                    capture_output=True,
                    check=False,
                    user=self.user,
                    timeout=60,
                )
        if self.etcd is not None:
            self.etcd.kill()
            self.etcd.wait(30)
        shutil.rmtree(self.folder, ignore_errors=True)

    def _start_etcd(self) -> None:
        log = open(self.folder / "etcd.log", "wb")  # noqa: SIM115 - kept open for the process
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer}"
        self.etcd = subprocess.Popen(
            [
                shutil.which("etcd") or "etcd",
                "--name",
                "e1",
                "--data-dir",
                str(self.folder / "etcd"),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"e1={peer}",
                "--enable-v2=false",
            ],
            stdout=log,
            stderr=log,
        )

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=2) as r:  # noqa: S310
                    return b"true" in r.read()
            except OSError:
                return False

        poll(healthy, 60, "etcd to answer")

    def _write_config(self, member: Member) -> None:
        data = self.folder / member.name
        config = {
            "scope": SCOPE,
            "name": member.name,
            "log": {"level": "WARNING", "dir": str(self.folder), "file_num": 1},
            "restapi": {
                "listen": f"127.0.0.1:{member.api_port}",
                "connect_address": f"127.0.0.1:{member.api_port}",
            },
            "etcd3": {"hosts": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": 20,
                    "loop_wait": 1,
                    "retry_timeout": 4,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "wal_log_hints": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "fsync": "off",
                            "max_connections": 200,
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{member.pg_port}",
                "connect_address": f"127.0.0.1:{member.pg_port}",
                "data_dir": str(data),
                "bin_dir": str(self.bindir),
                "pgpass": str(self.folder / f"{member.name}.pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(self.folder)},
            },
        }
        # JSON is YAML: Patroni reads it as its configuration file.
        member.config.write_text(json.dumps(config, indent=2))

    def _start(self, member: Member) -> None:
        log = open(self.folder / f"{member.name}.out", "wb")  # noqa: SIM115 - the process's
        member.proc = subprocess.Popen(
            [str(PATRONI_BIN / "patroni"), str(member.config)],
            stdout=log,
            stderr=log,
            user=self.user,
            cwd=self.folder,
            start_new_session=True,
        )
