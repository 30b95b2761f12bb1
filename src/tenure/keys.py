"""API keys: generated here, stored as SHA-256 digests, compared in constant time.

A tenant key reads `tnr_<key id>_<secret>`. The key id is public (it names the stored row, so a
lookup needs no scan and a revocation can name one key); the secret is 256 random bits, which is
why a fast digest is enough: nobody can brute-force 2^256 guesses, slow hash or not.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass

_PREFIX = "tnr"
_KEY = re.compile(r"^tnr_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key as issued: shown once to the user, stored only as `key_sha256`."""

    key_id: str
    key: str
    key_sha256: str


def digest(key: str) -> str:
    """The stored form of a key: the hex SHA-256 of its text."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> NewKey:
    """A fresh tenant key."""
    key_id = secrets.token_hex(6)
    key = f"{_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
    return NewKey(key_id=key_id, key=key, key_sha256=digest(key))


def key_id_of(key: str) -> str | None:
    """The key id of a well-formed tenant key, else None."""
    match = _KEY.match(key)
    return match[1] if match else None


def matches(key: str, key_sha256: str) -> bool:
    """Whether `key` is the key stored as `key_sha256`, in time independent of where they differ."""
    return hmac.compare_digest(digest(key), key_sha256.lower())


def new_admin_key() -> NewKey:
    """A fresh admin key: configured by its digest (`TENURE_ADMIN_KEY_SHA256`), never stored."""
    key = f"{_PREFIX}_admin_{secrets.token_urlsafe(32)}"
    return NewKey(key_id="admin", key=key, key_sha256=digest(key))


ADMIN_KEY_ENV = "TENURE_ADMIN_KEY_SHA256"


def admin_digest_from_env() -> str | None:
    """The admin key's digest from $TENURE_ADMIN_KEY_SHA256, if set (`tenure serve` and
    `tenure mcp` read it; neither needs the other's extra for that)."""
    return os.environ.get(ADMIN_KEY_ENV) or None
