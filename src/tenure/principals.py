"""Keys bound to principals: which principals a key may act for and read.

A tenant key bound to `user:42` acts for `user:42` only; bound to `user:42/`, for `user:42` and
every principal under it (`user:42/session-7`). An unbound key is a service key: it may name
any principal of its tenant. The binding is what the key may claim, not what the app grants:
the app's permission functions still decide what that principal may see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenure.errors import InvalidArgument, PrincipalNotAllowed
from tenure.evidence import check_principal


@dataclass(frozen=True, slots=True)
class Binding:
    """The principal (or `prefix/`) a key is bound to."""

    value: str

    @classmethod
    def of(cls, value: Any) -> Binding:
        """A binding from user input: a principal, or one ending in `/` with a principal
        before it."""
        value = check_principal(value)
        if value.strip("/") == "" or value.endswith("//"):
            raise InvalidArgument(
                f"a key's principal is a principal such as 'user:42', or one followed by a "
                f"single '/' for it and every principal under it, got {value!r}"
            )
        return cls(value)

    @property
    def principal(self) -> str:
        """The principal the key acts for when a call names none."""
        return self.value.removesuffix("/")

    @property
    def prefix(self) -> str | None:
        """With a trailing `/`: what every narrower principal starts with."""
        return self.value if self.value.endswith("/") else None

    def allows(self, principal: str | None) -> bool:
        """Whether the key may act for, or read a job of, `principal`."""
        if principal is None:
            return False
        if principal == self.principal:
            return True
        return self.prefix is not None and principal.startswith(self.prefix)

    def acting_for(self, requested: str | None) -> str:
        """The principal a call of this key acts for: the one it names, if allowed."""
        if requested is None:
            return self.principal
        if not self.allows(requested):
            raise PrincipalNotAllowed(
                f"this key is bound to the principal {self.value!r} and may not act for "
                "another (nothing was written)"
            )
        return requested
