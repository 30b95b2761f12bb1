"""Evidence by reference: what a job relied on (a document and its version, a code run's diff
and tests, a media file and who processed it), and whom it acts for. Never content: a
reference names where the content is and which version of it, so that a resume can check
that it is still allowed and still the same.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any, ClassVar

from tenure.errors import InvalidArgument

SHA256 = re.compile(r"^[0-9a-f]{64}$")
MAX_PRINCIPAL_LENGTH = 256
MAX_FIELD_LENGTH = 2048


def check_principal(value: Any) -> str:
    """Whom a job acts for (`user:42`): a string of 1-256 characters without control
    characters. tenure stores and shows it; the app's permission functions interpret it."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"the principal must be a non-empty string, got {value!r}")
    if len(value) > MAX_PRINCIPAL_LENGTH:
        raise InvalidArgument(
            f"the principal must be at most {MAX_PRINCIPAL_LENGTH} characters, got {len(value)}"
        )
    _check_field_text(value, "principal")
    return value


def _check_field_text(value: str, what: str) -> None:
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in value):
        raise InvalidArgument(
            f"the {what} contains a control character or a lone surrogate: it is printed in "
            "logs and terminals"
        )


def _text(value: Any, what: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"the {what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_FIELD_LENGTH:
        raise InvalidArgument(f"the {what} must be at most {MAX_FIELD_LENGTH} characters")
    _check_field_text(value, what)
    return value


def _sha256(value: Any, what: str) -> str:
    if not isinstance(value, str) or not SHA256.match(value):
        raise InvalidArgument(
            f"the {what} must be a SHA-256 digest (64 lowercase hex characters), got {value!r}"
        )
    return value


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise InvalidArgument(f"the {what} must be an integer from 0, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class DocumentRef:
    """A document a job relied on: where it is, which version, the digest of that version's
    content, and the index version it was found in (None when it was not retrieved)."""

    source: str
    version: str
    sha256: str
    index_version: str | None = None
    type: ClassVar[str] = "document"

    def __post_init__(self) -> None:
        _text(self.source, "document's source")
        _text(self.version, "document's version")
        _sha256(self.sha256, "document's sha256")
        _text(self.index_version, "document's index_version", optional=True)


@dataclass(frozen=True, slots=True)
class CodeResult:
    """What a code run produced, as evidence: the digest of its diff and where the diff is,
    the counts of a real test run, the command that ran them, and where its log is."""

    diff_sha256: str
    diff_ref: str
    tests_passed: int
    tests_failed: int
    command: str
    log_ref: str | None = None
    type: ClassVar[str] = "code"

    def __post_init__(self) -> None:
        _sha256(self.diff_sha256, "code result's diff_sha256")
        _text(self.diff_ref, "code result's diff_ref")
        _count(self.tests_passed, "code result's tests_passed")
        _count(self.tests_failed, "code result's tests_failed")
        _text(self.command, "code result's command")
        _text(self.log_ref, "code result's log_ref", optional=True)


@dataclass(frozen=True, slots=True)
class MediaRef:
    """An image or a recording a job used: its source, the digest of its bytes, and the
    processor (OCR, speech-to-text) and processor version that read it."""

    source: str
    sha256: str
    processor: str
    processor_version: str
    type: ClassVar[str] = "media"

    def __post_init__(self) -> None:
        _text(self.source, "media's source")
        _sha256(self.sha256, "media's sha256")
        _text(self.processor, "media's processor")
        _text(self.processor_version, "media's processor_version")


Reference = DocumentRef | CodeResult | MediaRef
_TYPES: dict[str, type[DocumentRef] | type[CodeResult] | type[MediaRef]] = {
    "document": DocumentRef,
    "code": CodeResult,
    "media": MediaRef,
}


def check_reference(ref: Any) -> Reference:
    """A reference as given to `ctx.evidence`: one of the three types (already checked by
    their constructors), or a clear error."""
    if isinstance(ref, DocumentRef | CodeResult | MediaRef):
        return ref
    raise InvalidArgument(
        "evidence must be a tenure.DocumentRef, CodeResult or MediaRef (a reference, never "
        f"content), got {type(ref).__name__}"
    )


def reference_json(ref: Reference) -> str:
    """The canonical JSON text of a reference (sorted keys), as stored."""
    return json.dumps(asdict(ref), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def reference_sha256(ref: Reference) -> str:
    """The digest that makes one evidence row per reference and job."""
    text = f"{ref.type}:{reference_json(ref)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reference_from(type_name: str, value: Mapping[str, Any]) -> Reference:
    """A reference read back from storage or from a cached retrieval."""
    cls = _TYPES.get(type_name)
    if cls is None or not isinstance(value, Mapping):
        raise InvalidArgument(f"unknown evidence type {type_name!r}")
    names = {f.name for f in fields(cls)}
    return cls(**{key: val for key, val in value.items() if key in names})


def document_refs(values: Any) -> list[DocumentRef]:
    """What a search or a recheck returned, checked: a list of `DocumentRef`."""
    if not isinstance(values, list | tuple):
        raise InvalidArgument(
            f"a retriever must return a list of tenure.DocumentRef, got {type(values).__name__}"
        )
    for value in values:
        if not isinstance(value, DocumentRef):
            raise InvalidArgument(
                f"a retriever must return tenure.DocumentRef values, got {type(value).__name__}"
            )
    return list(values)


@dataclass(frozen=True, slots=True)
class Evidence:
    """One reference a job recorded: in the order recorded, with the token and attempt that
    wrote it and the retriever that found it (None for `ctx.evidence`)."""

    seq: int
    ref: Reference
    retriever: str | None
    token: int
    attempt: int
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (the CLI's and the HTTP API's)."""
        return {
            "seq": self.seq,
            "type": self.ref.type,
            "ref": asdict(self.ref),
            "retriever": self.retriever,
            "token": self.token,
            "attempt": self.attempt,
            "at": self.at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class Allowed:
    """What a principal may see through one retriever: the candidate `filter` the search must
    apply (the app's own value: a list of groups, a SQL fragment's parameters), and the
    `version` of those permissions (bumped when they change: a new version is a cache miss)."""

    filter: Any
    version: str

    def __post_init__(self) -> None:
        if isinstance(self.version, int) and not isinstance(self.version, bool):
            object.__setattr__(self, "version", str(self.version))
        _text(self.version, "permission version")
