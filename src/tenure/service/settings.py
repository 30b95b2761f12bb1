"""What an operator can set on `tenure serve`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tenure import keys
from tenure.errors import InvalidArgument

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_WAIT_SECONDS = 30.0
DEFAULT_MAX_WAITS_PER_TENANT = 1000
_SHA256_HEX = re.compile(r"^[0-9a-fA-F]{64}$")


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """`admin_key_sha256`: the digest of the admin key (the key itself is never configured);
    `metrics_need_key`: /metrics asks for the admin key; `metrics_by_tenant`: a tenant label on
    queue metrics (off by default: tenants can be many); `max_waits_per_tenant`: long-polls
    one tenant may hold at once (past it, 429)."""

    admin_key_sha256: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS
    metrics_need_key: bool = False
    metrics_by_tenant: bool = False
    max_waits_per_tenant: int = DEFAULT_MAX_WAITS_PER_TENANT

    def __post_init__(self) -> None:
        if self.admin_key_sha256 is not None and not _SHA256_HEX.match(self.admin_key_sha256):
            raise InvalidArgument(
                "the admin key digest must be 64 hex characters: the SHA-256 that "
                "`tenure tenant admin-key` prints"
            )
        if self.max_body_bytes < 1:
            raise InvalidArgument(f"max_body_bytes must be at least 1, got {self.max_body_bytes}")
        if not 0 < self.max_wait_seconds <= 3600:
            raise InvalidArgument("max_wait_seconds must be in (0, 3600]")
        if not 1 <= self.max_waits_per_tenant <= 1_000_000:
            raise InvalidArgument("max_waits_per_tenant must be in [1, 1000000]")
        if self.metrics_need_key and self.admin_key_sha256 is None:
            raise InvalidArgument("/metrics can only ask for the admin key when one is configured")

    @classmethod
    def admin_digest_from_env(cls) -> str | None:
        """The admin key digest from $TENURE_ADMIN_KEY_SHA256, if set."""
        return keys.admin_digest_from_env()
