"""Checking a tool's arguments against its JSON Schema before any job is made (jsonschema,
which every tool extra installs)."""

from __future__ import annotations

from typing import Any

from jsonschema import exceptions as schema_errors
from jsonschema import validators

from tenure.errors import InvalidArgument


def schema_validator(schema: dict[str, Any], what: str) -> Any:
    """A validator for `schema`; `InvalidArgument` naming `what` if it is not a JSON Schema."""
    checker = validators.validator_for(schema)
    try:
        checker.check_schema(schema)
    except schema_errors.SchemaError as exc:
        problem = f"{what}: the input schema is not a JSON Schema: {exc.message}"
        raise InvalidArgument(problem) from None
    return checker(schema)


def argument_problems(validator: Any, arguments: Any) -> list[str]:
    """What is wrong with the arguments, one line each by field (empty when they are valid)."""
    found = sorted(validator.iter_errors(arguments), key=lambda e: list(map(str, e.path)))
    return [f"{'/'.join(map(str, e.path)) or '(arguments)'}: {e.message}" for e in found]
