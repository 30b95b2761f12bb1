"""How a job is submitted: one options value that every door carries to the ledger.

`SubmitOptions` is the value; `SubmitKwargs` lets `submit(kind, payload, tenant="acme")` keep
its keywords (they are this value's fields, checked by type checkers). A new submit option is
a field here (and its column): the doors pass the value along without naming its fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitOptions:
    """Everything a submit may say besides the kind and the payload.

    - `idempotency_key`: a key the tenant already used returns that job's id when kind and
      payload are the same JSON value, and raises `IdempotencyConflict` otherwise.
    - `tenant`: whose job it is (default `"default"`).
    - `max_attempts`: attempts before the job ends `failed` (default: the ledger's).
    - `priority`: higher is claimed first (default 0).
    - `run_after`: a time, or a delay (timedelta or seconds) from the database's now.
    - `labels`: keys the kind's job class leaves to the submitter (`tenure.labels`).
    - `traceparent`: a W3C trace parent (default: the current OpenTelemetry span's).
    - `principal`: whom the job acts for (`user:42`); shown as `Job.principal` and
      `ctx.principal`, interpreted only by the app's permission functions.
    - `budget`: what the run may spend (`{"usd": 5, "calls": 50}`, the app's units, reported
      by its handlers with `ctx.report_cost`); see `tenure.budgets`.
    """

    idempotency_key: str | None = None
    tenant: str = DEFAULT_TENANT
    max_attempts: int | None = None
    priority: int = 0
    run_after: datetime | timedelta | float | None = None
    labels: Mapping[str, str] | None = None
    traceparent: str | None = None
    principal: str | None = None
    budget: Mapping[str, float] | None = None

    def merged(self, changes: Mapping[str, Any]) -> SubmitOptions:
        """These options with `changes` (a `SubmitKwargs`) applied; an unknown name is a
        TypeError, as an unknown keyword argument is."""
        unknown = sorted(set(changes) - SUBMIT_OPTION_NAMES)
        if unknown:
            raise TypeError(f"submit() got unexpected keyword argument(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes) if changes else self


class SubmitKwargs(TypedDict, total=False):
    """`SubmitOptions`' fields as keyword arguments (`**options: Unpack[SubmitKwargs]`)."""

    idempotency_key: str | None
    tenant: str
    max_attempts: int | None
    priority: int
    run_after: datetime | timedelta | float | None
    labels: Mapping[str, str] | None
    traceparent: str | None
    principal: str | None
    budget: Mapping[str, float] | None


SUBMIT_OPTION_NAMES = frozenset(field.name for field in dataclasses.fields(SubmitOptions))
_DEFAULTS = SubmitOptions()


def changed_options(options: SubmitOptions) -> dict[str, Any]:
    """The options that differ from the defaults, by field name (what a request carries)."""
    return {
        field.name: getattr(options, field.name)
        for field in dataclasses.fields(options)
        if getattr(options, field.name) != getattr(_DEFAULTS, field.name)
    }


def submit_options(options: SubmitOptions | None, changes: Mapping[str, Any]) -> SubmitOptions:
    """The options a submit call means: `options` (or the defaults) with its keywords applied."""
    if options is not None and not isinstance(options, SubmitOptions):
        raise TypeError(f"options must be a SubmitOptions, not {type(options).__name__}")
    return (options or SubmitOptions()).merged(changes)
