"""A database URL tenure would read otherwise than it is written is refused before anything is
made or any server is asked: `sqlite://foo.db` (a host, not a file), and a PostgreSQL parameter
that libpq reads as an integer but is not one. The command line says so in one line, exit 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import tenure
from tests.support.cli import tenure_cli


def closed_port() -> int:
    """A loopback port nothing listens on: a URL that got as far as connecting fails there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("url", ["sqlite://foo.db", "sqlite://foo.db?x=1", "sqlite://host/x.db"])
def test_a_sqlite_url_with_a_host_is_refused(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    host = url.removeprefix("sqlite://").split("?")[0].split("/")[0]
    with pytest.raises(tenure.UnsupportedDatabase) as refused:
        tenure.connect(url)
    assert str(refused.value) == (
        f"{url} names host {host!r}; a SQLite URL is sqlite:///relative/path.db or "
        "sqlite:////absolute/path.db"
    )
    assert list(tmp_path.iterdir()) == [], "nothing was created"


def test_sqlite_urls_with_three_or_four_slashes_still_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url in ("sqlite:///relative.db", f"sqlite:///{tmp_path}/absolute.db"):
        with tenure.connect(url) as ledger:
            ledger.submit("k", {})
    assert (tmp_path / "relative.db").exists() and (tmp_path / "absolute.db").exists()


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("connect_timeout=abc", "connect_timeout=abc in the PostgreSQL URL is not a whole number"),
        ("connect_timeout=1.5", "connect_timeout=1.5 in the PostgreSQL URL is not a whole number"),
        ("keepalives=yes", "keepalives=yes in the PostgreSQL URL is not a whole number"),
        ("keepalives_idle=", "keepalives_idle= in the PostgreSQL URL is not a whole number"),
        ("keepalives_interval=1e3", "keepalives_interval=1e3 in the PostgreSQL URL"),
        ("keepalives_count=99999999999", "keepalives_count=99999999999 in the PostgreSQL URL"),
        ("tcp_user_timeout=10s", "tcp_user_timeout=10s in the PostgreSQL URL"),
        ("port=abc", "port is not a whole number from 1 to 65535"),
        ("port=70000", "port is not a whole number from 1 to 65535"),
        ("port=0", "port is not a whole number from 1 to 65535"),
    ],
)
def test_a_postgres_integer_parameter_that_is_not_one_is_refused_before_connecting(
    query: str, said: str
) -> None:
    """On a port where nothing listens, a URL that were let through would fail to connect
    (StoreUnavailable); the refusal comes first, as bad input."""
    url = f"postgresql://nobody@127.0.0.1:{closed_port()}/nowhere?{query}"
    with pytest.raises(tenure.UnsupportedDatabase, match=said):
        tenure.connect(url, timeout=1.0)


@pytest.mark.parametrize(
    "query",
    ["connect_timeout=10", "connect_timeout=%2010%20", "keepalives=1&keepalives_idle=30", ""],
)
def test_postgres_integer_parameters_that_are_integers_pass(query: str) -> None:
    """The same URLs with whole numbers get as far as connecting."""
    with pytest.raises(tenure.StoreUnavailable, match="cannot connect"):
        tenure.connect(f"postgresql://nobody@127.0.0.1:{closed_port()}/nowhere?{query}", timeout=1)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "url", "said"),
    [
        (["submit", "k"], "sqlite://foo.db", "sqlite://foo.db names host 'foo.db'"),
        (["status", "x"], "sqlite://foo.db", "sqlite://foo.db names host 'foo.db'"),
        (["worker", "tenure.demo.app:app"], "sqlite://foo.db", "names host 'foo.db'"),
        (["demo"], "sqlite://foo.db", "names host 'foo.db'"),
        (
            ["submit", "k"],
            "postgresql://nobody@127.0.0.1/x?connect_timeout=abc",
            "connect_timeout=abc",
        ),
        (["worker", "tenure.demo.app:app"], "postgresql://u@127.0.0.1/x?port=abc", "port is not"),
        (["demo"], "postgresql://nobody@127.0.0.1/x?keepalives_idle=x", "keepalives_idle=x"),
    ],
)
def test_the_command_line_says_it_in_one_line_and_exits_2(
    command: list[str], url: str, said: str, tmp_path: Path
) -> None:
    """As `--db` and as `$TENURE_DATABASE_URL` (which the demo does not read): exit 2, one
    line, nothing made (no database file, no demo workspace in the temporary folder)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    ways: list[tuple[list[str], str | None]] = [([*command, "--db", url], None)]
    if command != ["demo"]:
        ways.append((command, url))
    for args, db in ways:
        result = tenure_cli(*args, db=db, cwd=work, env={"TMPDIR": str(temporary)})
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.startswith("tenure: error: ") and said in result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stdout == ""
        assert list(work.iterdir()) == [] and list(temporary.iterdir()) == []


def test_a_password_read_as_a_port_is_not_repeated() -> None:
    """`app:s3cret/x@db`: libpq reads host `app`, port `s3cret`; the refusal does not print it
    and says how to write such a password."""
    with pytest.raises(tenure.UnsupportedDatabase) as refused:
        tenure.connect("postgresql://app:s3cret/x@127.0.0.1/db", timeout=1.0)
    assert "s3cret" not in str(refused.value)
    assert "%2F" in str(refused.value)
