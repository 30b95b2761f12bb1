"""Input checks shared by the ledger and the CLI: each failure says what to do instead."""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
import uuid
from dataclasses import dataclass
from typing import Any

from tenure.errors import InvalidArgument, JobNotFound, PayloadTooLarge

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_NAME_LENGTH = 200


@dataclass(frozen=True, slots=True)
class EncodedJson:
    """A JSON value in canonical text form (sorted keys, no spaces), with its size and hash."""

    text: str
    size: int
    sha256: str


_NULL = EncodedJson("null", 4, hashlib.sha256(b"null").hexdigest())

MAX_JSON_DEPTH = 64
# A checkpoint holds stage results a few levels down in its envelope.
MAX_CHECKPOINT_DEPTH = MAX_JSON_DEPTH + 16
# What a read will still hand out (older versions stored deeper values): well below the depth
# at which JSON serialisers give up.
MAX_READABLE_DEPTH = 128


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` nests lists and objects more than `limit` levels deep (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if not isinstance(item, dict | list | tuple):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def check_json_shape(value: Any, what: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Nesting at most `max_depth` deep, and no string (key or value) with a NUL or a lone
    UTF-16 surrogate: each of those would break a later read or write of the value."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, what)
            continue
        if not isinstance(item, dict | list | tuple):
            continue
        if depth > max_depth:
            raise InvalidArgument(
                f"the {what} is nested more than {max_depth} levels deep: flatten it"
            )
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    _check_text(key, what)
                stack.append((child, depth + 1))
        else:
            stack.extend((child, depth + 1) for child in item)


def _check_text(text: str, what: str) -> None:
    if "\x00" in text:
        raise InvalidArgument(f"the {what} contains a NUL character, which databases refuse")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"the {what} contains a lone UTF-16 surrogate, which is not text: encode it properly"
        ) from None


def encode_json(value: Any, what: str, limit: int, max_depth: int = MAX_JSON_DEPTH) -> EncodedJson:
    """Canonical JSON of `value`; raises if it is not JSON, is nested too deep, holds a NUL or
    a lone surrogate, or is larger than `limit` bytes."""
    if value is None and limit >= _NULL.size:  # a handler that returns nothing: most of them
        return _NULL
    check_json_shape(value, what, max_depth)
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"the {what} must be JSON-serialisable (dict, list, str, int, float, bool, None; "
            f"no NaN or infinity): {exc}"
        ) from exc
    data = text.encode("utf-8")
    if len(data) > limit:
        raise PayloadTooLarge(
            f"the {what} is {len(data)} bytes, over the limit of {limit} bytes: store large "
            "content elsewhere and pass a reference, or raise max_payload_bytes"
        )
    return EncodedJson(text, len(data), hashlib.sha256(data).hexdigest())


def check_name(value: Any, what: str) -> str:
    """A kind, tenant, owner id or key: a non-empty string without NUL, at most 200 chars."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"the {what} must be a non-empty string, got {value!r}")
    if "\x00" in value or len(value) > MAX_NAME_LENGTH:
        raise InvalidArgument(
            f"the {what} must be at most {MAX_NAME_LENGTH} characters and contain no NUL"
        )
    if any(unicodedata.category(char) == "Cc" for char in value):
        raise InvalidArgument(
            f"the {what} contains a control character (a terminal escape, a newline…): "
            "names are printed in logs and terminals"
        )
    _check_text(value, what)
    return value


def check_job_id(value: Any) -> str:
    """The canonical text of a job id; anything that is not a UUID is an unknown job."""
    if isinstance(value, uuid.UUID):
        return str(value)
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise JobNotFound(f"no job has the id {value!r} (job ids are UUIDs)") from None


def check_number(value: Any, what: str, low: float, high: float) -> float:
    """A finite number (an int or a float, not a bool) from `low` to `high`. An integer too
    large for a float is refused too, without printing its thousands of digits."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what} must be a number, got {type(value).__name__}")
    bounds = f"from {_plain(low)} to {_plain(high)}"
    if isinstance(value, int) and not low <= value <= high:  # float() of 10**400 overflows
        shown = value if abs(value) < 10**30 else "an integer out of range"
        raise InvalidArgument(f"{what} must be a finite number {bounds}, got {shown}")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise InvalidArgument(f"{what} must be a finite number {bounds}, got {value!r}")
    return number


def _plain(number: float) -> str:
    """1e15, not 1e+15; 86400, not 86400.0."""
    return f"{number:.15g}".replace("e+", "e")


def check_seconds(value: Any, what: str) -> float:
    """A positive, finite number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"the {what} must be a number of seconds, got {value!r}")
    if isinstance(value, int) and abs(value) > 10**15:  # float() of 10**400 overflows
        raise InvalidArgument(f"the {what} must be a finite number of seconds, got a huge integer")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"the {what} must be a positive number of seconds, got {value!r}")
    return seconds


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def check_int(value: Any, what: str, minimum: int = INT32_MIN, maximum: int = INT32_MAX) -> int:
    """An int (not a bool) between `minimum` and `maximum` (by default a 32-bit column's range)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"the {what} must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidArgument(f"the {what} must be at least {minimum}, got {value}")
    if value > maximum:
        raise InvalidArgument(f"the {what} must be at most {maximum}, got {value}")
    return value
