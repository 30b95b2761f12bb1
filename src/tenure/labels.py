"""Labels: what a job is besides its kind (the tool, the provider, the model), so that metrics
and traces can tell a browser's timeouts from a search call's.

A job class declares its label keys: `labels={"tool": "browser", "model": None}`. A value is
fixed by the class; None marks a key that each submit may set (`submit(..., labels={"model":
"m-2"})`). A submit may set only keys its class declares as its own, with short values, so the
number of series stays bounded; metrics fold the rarer values of a key into `other` past
`MAX_VALUES_PER_KEY` distinct ones.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from tenure.errors import InvalidArgument

MAX_KEYS = 8
MAX_VALUE_LENGTH = 64
MAX_VALUES_PER_KEY = 20
OTHER = "other"
_KEY = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_VALUE = re.compile(r"^[\x21-\x7e][\x20-\x7e]*$")
# Label names tenure's own metrics already use, and Prometheus's reserved ones.
RESERVED = frozenset(
    {"kind", "tenant", "state", "worker", "variant", "le", "quantile", "job", "unit"}
)

Declared = dict[str, str | None]
# A worker's counters of what happened to jobs: (counter, kind, sorted label items) -> count.
JobCounts = dict[tuple[str, str, tuple[tuple[str, str], ...]], int]
# What a worker's jobs reported spending (`ctx.report_cost`): (kind, unit, sorted label items).
JobSpend = dict[tuple[str, str, tuple[tuple[str, str], ...]], float]


def check_declared(labels: Any, where: str) -> Declared:
    """A job class's declaration: at most MAX_KEYS keys, each a fixed value or None."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise InvalidArgument(f"{where}: labels must be a mapping of key to value or None")
    if len(labels) > MAX_KEYS:
        raise InvalidArgument(f"{where}: at most {MAX_KEYS} label keys, got {len(labels)}")
    return {
        _key(key, where): None if value is None else _value(value, key, where)
        for key, value in labels.items()
    }


def check_submitted(labels: Any, declared: Declared | None, kind: str) -> dict[str, str]:
    """A submit's labels: only keys the kind's class leaves to the submitter (None there)."""
    where = f"labels of a {kind!r} job"
    if not isinstance(labels, Mapping):
        raise InvalidArgument(f"{where} must be a mapping of key to value")
    if declared is None:
        raise InvalidArgument(
            f"kind {kind!r} declares no labels (a job class declares them, "
            "@app.job(..., labels={...}), when its app connects): refused"
        )
    checked: dict[str, str] = {}
    for key, value in labels.items():
        if key not in declared:
            own = sorted(k for k, v in declared.items() if v is None)
            raise InvalidArgument(
                f"{where}: key {key!r} is not declared by its job class "
                f"(keys a submit may set: {', '.join(own) or 'none'})"
            )
        if declared[key] is not None:
            raise InvalidArgument(f"{where}: {key!r} is fixed by the job class")
        checked[key] = _value(value, key, where)
    return checked


def merged(declared: Declared | None, submitted: Mapping[str, str] | None) -> dict[str, str]:
    """A job's labels: its class's fixed values and what its submit set (no value: "")."""
    values = {key: value or "" for key, value in (declared or {}).items()}
    values.update(submitted or {})
    return values


def fold(series: Iterable[tuple[Mapping[str, str], int]], cap: int) -> dict[str, set[str]]:
    """For each key, the values that keep their own series: the `cap` with the most weight
    (jobs, events); the others are reported as `other`."""
    weights: dict[str, Counter[str]] = {}
    for labels, weight in series:
        for key, value in labels.items():
            weights.setdefault(key, Counter())[value] += max(weight, 1)
    return {
        key: {value for value, _ in counter.most_common(cap)} for key, counter in weights.items()
    }


def folded(labels: Mapping[str, str], kept: Mapping[str, set[str]]) -> dict[str, str]:
    """`labels` with each value outside its key's kept values reported as `other`."""
    return {
        key: value if value in kept.get(key, ()) or not value else OTHER
        for key, value in labels.items()
    }


def _key(key: Any, where: str) -> str:
    if not isinstance(key, str) or not _KEY.match(key) or key in RESERVED:
        raise InvalidArgument(
            f"{where}: label key {key!r} must be lower case letters, digits and _ (at most 32, "
            f"a letter first) and not one of {', '.join(sorted(RESERVED))}"
        )
    return key


def _value(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not _VALUE.match(value) or len(value) > MAX_VALUE_LENGTH:
        raise InvalidArgument(
            f"{where}: label {key!r} needs a printable value of 1 to {MAX_VALUE_LENGTH} "
            f"characters, got {value!r:.80}"
        )
    return value
