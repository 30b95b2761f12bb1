"""Retrievers: a search function registered with `@app.retriever`, the permission functions
that bound it, and the key its results are cached under.

`ctx.retrieve(name, query)` runs: permissions (who may see what, and that permission's
version) → the cache, looked up by tenant and key → on a miss, the search with the candidate
filter → the recheck of every ref before it is returned (a hit too) → the refs recorded as
evidence. The key names the tenant, the permission version, the index version, the normalised
query and the limit: a changed permission or index is a new key, a miss, nothing to evict.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Callable
from typing import Any, TypeVar

from tenure.errors import InvalidArgument, InvalidJobClass
from tenure.evidence import Allowed, DocumentRef
from tenure.validation import check_int, check_name

Search = Callable[..., list[DocumentRef]]
Permissions = Callable[[str | None, str], Allowed]
Recheck = Callable[[str | None, list[DocumentRef]], list[DocumentRef]]
CurrentVersion = Callable[[DocumentRef], DocumentRef | None]
F = TypeVar("F", bound=Callable[..., Any])

MAX_LIMIT = 100
MAX_QUERY_CHARS = 8192
DEFAULT_CACHE_TTL = 3600.0


def normalise_query(query: Any) -> str:
    """The query as the cache sees it: NFKC, case-folded, runs of white space as one space."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgument(f"a retrieval query must be a non-empty string, got {query!r}")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgument(f"a retrieval query must be at most {MAX_QUERY_CHARS} characters")
    if "\x00" in query or any(unicodedata.category(c) == "Cs" for c in query):
        raise InvalidArgument("a retrieval query must not contain NUL or a lone surrogate")
    return " ".join(unicodedata.normalize("NFKC", query).casefold().split())


def check_limit(limit: Any) -> int:
    """How many refs a retrieval returns at most: 1 to 100."""
    return check_int(limit, "retrieval limit", 1, MAX_LIMIT)


def cache_key(
    tenant: str,
    permission_version: str,
    index_version: str,
    query: str,
    limit: int,
    allowed_filter: Any = None,
) -> str:
    """sha256 over every input that decides the answer: the tenant, the permission version,
    the index version, the normalised query, the limit, and the candidate filter itself (so
    that two principals given one version but different filters still never share an entry;
    a filter that is not JSON gets its repr: at worst a miss). Tests replace this function (a
    forced collision) to show that the tenant partition, not the hash, keeps tenants apart."""
    filter_text = json.dumps(allowed_filter, sort_keys=True, default=repr, ensure_ascii=False)
    parts = [tenant, permission_version, index_version, query, limit, filter_text]
    text = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Retriever:
    """A registered search and its permission functions (see the module docstring).

    `search(query, *, allowed, limit) -> list[DocumentRef]` must apply `allowed` (the
    `Allowed.filter` of the principal) to its candidates; `index_version()` names the index it
    searches. Decorate `permissions(principal, tenant) -> Allowed` and `recheck(principal,
    refs) -> the refs still allowed` (both required before a job retrieves), and optionally
    `current_version(ref) -> the ref as it is now, or None when it is gone`.
    """

    def __init__(
        self, name: str, search: Search, index_version: Callable[[], Any], cache_ttl: float
    ) -> None:
        self.name = name
        self.search = search
        self.index_version = index_version
        self.cache_ttl = cache_ttl
        self.permissions_fn: Permissions | None = None
        self.recheck_fn: Recheck | None = None
        self.current_version_fn: CurrentVersion | None = None

    def permissions(self, fn: F) -> F:
        """Register `(principal, tenant) -> Allowed(filter, version)`."""
        self.permissions_fn = _callable(fn, self.name, "permissions")
        return fn

    def recheck(self, fn: F) -> F:
        """Register `(principal, refs) -> the refs still allowed` (run before every return)."""
        self.recheck_fn = _callable(fn, self.name, "recheck")
        return fn

    def current_version(self, fn: F) -> F:
        """Register `(ref) -> the ref as it is now (None: gone)`, for resume checks."""
        self.current_version_fn = _callable(fn, self.name, "current_version")
        return fn

    def checked_index_version(self) -> str:
        """The index version as text, or a clear error."""
        value = self.index_version()
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value:
            raise InvalidArgument(
                f"retriever {self.name!r}: index_version() must return a non-empty string, "
                f"got {value!r}"
            )
        return value

    def ready(self) -> tuple[Permissions, Recheck]:
        """Its two permission functions, or a clear error naming the missing one."""
        if self.permissions_fn is None or self.recheck_fn is None:
            missing = "permissions" if self.permissions_fn is None else "recheck"
            raise InvalidJobClass(
                f"retriever {self.name!r} has no @{self.name}.{missing} function: a retriever "
                "limits candidates before the search and rechecks them before returning"
            )
        return self.permissions_fn, self.recheck_fn


def new_retriever(
    name: str, search: Any, index_version: Any, cache_ttl: Any = DEFAULT_CACHE_TTL
) -> Retriever:
    """A `Retriever`, its arguments checked."""
    check_name(name, "retriever name")
    _callable(search, name, "search")
    _callable(index_version, name, "index_version")
    if (
        isinstance(cache_ttl, bool)
        or not isinstance(cache_ttl, int | float)
        or not math.isfinite(cache_ttl)
        or cache_ttl < 0
    ):
        raise InvalidJobClass(
            f"retriever {name!r}: cache_ttl must be seconds >= 0 (0: no cache), got {cache_ttl!r}"
        )
    return Retriever(name, search, index_version, float(cache_ttl))


def _callable(fn: Any, name: str, what: str) -> Any:
    if not callable(fn):
        raise InvalidJobClass(f"retriever {name!r}: {what} must be callable, got {fn!r}")
    return fn
