"""Connection poolers: how tenure's settings reach the server with and without one.

A direct connection carries tenure's settings (timeouts, UTC, the plan cache mode, the URL's own
`options`) as startup options, and they hold for the session. A transaction pooler (PgBouncer
in transaction mode, and most managed poolers) refuses startup options and hands each
transaction to whichever server connection is free, so nothing of a session survives: there
tenure sets each setting with `set_config(name, value, true)` at the start of every
transaction, prepares no statement (unless `?prepare=1`: PgBouncer 1.21+ with
`max_prepared_statements` keeps them per server connection), and does not LISTEN through it
(`listen_url` names a direct connection for that).

Two query parameters of the URL are tenure's, not libpq's: `pooler=transaction` (or `none`)
and `prepare=0|1`. Without `pooler`, a server that refuses startup options is taken for a
pooler at connect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from tenure.errors import UnsupportedDatabase

_POOLER_VALUES = ("transaction", "none")
_OURS = ("pooler", "prepare")
_PREPARE_VALUES = {"0": False, "false": False, "no": False, "1": True, "true": True, "yes": True}


@dataclass(frozen=True, slots=True)
class UrlChoices:
    """What tenure's own query parameters asked for (None: not said)."""

    pooler: bool | None = None
    prepare: bool | None = None


def split_choices(url: str) -> tuple[str, UrlChoices]:
    """The URL without tenure's parameters (what libpq may parse), and what they said.

    The rest of the URL is kept byte for byte: libpq decodes `%20` but not `+`, so a query
    decoded and encoded again (`options=-c%20a%3Db` becoming `options=-c+a%3Db`) would mean
    something else to it. Each of tenure's parameters may be given once.
    """
    if not url.startswith(("postgresql://", "postgres://")):
        return url, UrlChoices()
    head, _, query = url.partition("?")
    kept: list[str] = []
    said: dict[str, str] = {}
    for part in query.split("&") if query else []:
        raw_name, _, raw_value = part.partition("=")
        name = unquote(raw_name)
        if name not in _OURS:
            kept.append(part)
            continue
        if name in said:
            raise UnsupportedDatabase(
                f"{name}= is given twice in the database URL ({name}={said[name]!r} and "
                f"{name}={unquote(raw_value)!r}): give it once"
            )
        said[name] = unquote(raw_value)
    stripped = f"{head}?{'&'.join(kept)}" if kept else head
    return stripped, UrlChoices(
        pooler=_pooler(said.get("pooler")), prepare=_prepare(said.get("prepare"))
    )


def _pooler(value: str | None) -> bool | None:
    if value is None:
        return None
    if value not in _POOLER_VALUES:
        raise UnsupportedDatabase(
            f"pooler={value!r} in the database URL: use pooler=transaction (through "
            "PgBouncer or another transaction pooler) or pooler=none (a direct connection)"
        )
    return value == "transaction"


def _prepare(value: str | None) -> bool | None:
    if value is None:
        return None
    if value.lower() not in _PREPARE_VALUES:
        raise UnsupportedDatabase(
            f"prepare={value!r} in the database URL: use prepare=0 or prepare=1"
        )
    return _PREPARE_VALUES[value.lower()]


def refuses_options(error: BaseException) -> bool:
    """True when a server refused the connection for its startup options: a pooler's answer
    (PgBouncer: `unsupported startup parameter: options`)."""
    text = str(error).lower()
    return "unsupported startup parameter" in text or "unrecognized startup parameter" in text


_TOKEN = re.compile(r"(?:\\.|\S)+")


def option_settings(options: str) -> list[tuple[str, str]]:
    """The `-c name=value` (or `--name=value`) settings of a libpq `options` string."""
    words = [re.sub(r"\\(.)", r"\1", word) for word in _TOKEN.findall(options)]
    settings: list[tuple[str, str]] = []
    position = 0
    while position < len(words):
        word = words[position]
        if word == "-c" and position + 1 < len(words):
            assignment = words[position + 1]
            position += 2
        elif word.startswith("-c") or word.startswith("--"):
            assignment, position = word[2:], position + 1
        else:
            raise UnsupportedDatabase(
                f"through a pooler tenure sets the URL's options in each transaction, and "
                f"{word!r} is not a `-c name=value` setting"
            )
        name, equals, value = assignment.partition("=")
        if not equals or not name:
            raise UnsupportedDatabase(
                f"the URL's options hold {assignment!r}, which is not `name=value`"
            )
        # PostgreSQL's setting names have no dashes: `--a-b=1` is `-c a_b=1`.
        settings.append((name.replace("-", "_"), value))
    return settings


def settings_statement(settings: list[tuple[str, str]]) -> tuple[str, list[str]]:
    """One statement that sets each setting for the current transaction only."""
    calls = ", ".join(f"set_config(${2 * i + 1}, ${2 * i + 2}, true)" for i in range(len(settings)))
    values = [part for pair in settings for part in pair]
    return f"SELECT {calls}", values
