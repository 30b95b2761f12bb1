"""A handler's evidence: retrieval through a registered retriever (permissions → cache or
search → recheck → recorded), and the principal a child job may act for."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tenure import retrieval
from tenure.errors import InvalidArgument, NonRetryable, ResumeRefused
from tenure.evidence import Allowed, DocumentRef, check_principal, document_refs
from tenure.retrieval import Retriever, check_limit, normalise_query
from tenure.types import Lease

if TYPE_CHECKING:
    from tenure.app import Narrowing
    from tenure.port import LeasePort

# At most this many dropped sources are named in one `evidence_retrieved` event.
MAX_DROPPED_NAMED = 20


@dataclass(frozen=True, slots=True)
class EvidenceRules:
    """The app's retrievers and its narrowing function, as a running job sees them."""

    retrievers: dict[str, Retriever] = field(default_factory=dict)
    narrowing: Narrowing | None = None


NO_RULES = EvidenceRules()


def retrieve(
    port: LeasePort, lease: Lease, rules: EvidenceRules, name: str, query: str, limit: int
) -> list[DocumentRef]:
    """See `JobContext.retrieve`."""
    retriever = rules.retrievers.get(name) if isinstance(name, str) else None
    if retriever is None:
        known = ", ".join(sorted(rules.retrievers)) or "none"
        raise InvalidArgument(f"no retriever is named {name!r} (registered: {known})")
    limit = check_limit(limit)
    normalised = normalise_query(query)
    permissions, recheck = retriever.ready()
    allowed = permissions(lease.principal, lease.tenant)
    if not isinstance(allowed, Allowed):
        raise InvalidArgument(
            f"retriever {name!r}: permissions must return tenure.Allowed(filter, version), "
            f"got {type(allowed).__name__}"
        )
    index_version = retriever.checked_index_version()
    key = retrieval.cache_key(
        lease.tenant, allowed.version, index_version, normalised, limit, allowed.filter
    )
    found = port.cached_refs(lease.tenant, key) if retriever.cache_ttl > 0 else None
    hit = found is not None
    if found is None:
        searched = document_refs(retriever.search(query, allowed=allowed.filter, limit=limit))
        found = [
            ref if ref.index_version else replace(ref, index_version=index_version)
            for ref in searched[:limit]
        ]
        if retriever.cache_ttl > 0:
            port.cache_refs(lease.tenant, key, name, found, retriever.cache_ttl)
    # A recheck can only drop: a ref it returns that the search did not find is not returned.
    still_allowed = set(document_refs(recheck(lease.principal, list(found))))
    kept = [ref for ref in found if ref in still_allowed]
    dropped = [ref for ref in found if ref not in still_allowed]
    for ref in kept:
        port.record_evidence(lease, ref, retriever=name)
    port.record_retrieval(
        lease,
        retriever=name,
        cache="hit" if hit else "miss",
        refs=len(kept),
        dropped=len(dropped),
        dropped_sources=[ref.source for ref in dropped[:MAX_DROPPED_NAMED]],
        permission_version=allowed.version,
        index_version=index_version,
    )
    return kept


def child_principal(
    rules: EvidenceRules, lease: Lease, requested: str | None, kind: str
) -> str | None:
    """The principal a child acts for: the parent's, or `requested` when the app's narrowing
    function says it is no wider. Anything else fails the parent (`principal_widened`)."""
    if requested is None or requested == lease.principal:
        return lease.principal
    try:
        requested = check_principal(requested)
    except InvalidArgument as exc:
        raise NonRetryable(str(exc), code="invalid_spawn") from None
    narrowing = rules.narrowing
    if narrowing is None or narrowing(lease.principal, requested, lease.tenant) is not True:
        reason = "the app has no @app.narrows function" if narrowing is None else "it is wider"
        raise NonRetryable(
            f"job {lease.job_id} acts for {lease.principal!r} and may not spawn a {kind!r} "
            f"child acting for {requested!r}: {reason}",
            code="principal_widened",
        )
    return requested


def recheck_evidence(port: LeasePort, lease: Lease, rules: EvidenceRules) -> None:
    """Before a resume: every recorded document ref whose retriever is registered is rechecked
    for the job's principal (`evidence_revoked` if one is dropped) and, where the retriever
    has `current_version`, compared with the document as it is now (`evidence_changed` if
    its version or sha256 differ, or it is gone). Raises `ResumeRefused`."""
    by_retriever: dict[str, list[DocumentRef]] = {}
    for record in port.evidence(lease.job_id):
        if isinstance(record.ref, DocumentRef) and record.retriever in rules.retrievers:
            by_retriever.setdefault(record.retriever, []).append(record.ref)
    for name, refs in by_retriever.items():
        retriever = rules.retrievers[name]
        _permissions, recheck = retriever.ready()
        still_allowed = set(document_refs(recheck(lease.principal, list(refs))))
        revoked = [ref.source for ref in refs if ref not in still_allowed]
        if revoked:
            raise ResumeRefused(
                "evidence_revoked",
                f"{len(revoked)} reference(s) of retriever {name!r} are no longer allowed for "
                f"{lease.principal!r}: {', '.join(revoked[:MAX_DROPPED_NAMED])}",
            )
        current = retriever.current_version_fn
        if current is None:
            continue
        changed = [ref.source for ref in refs if not _same_document(ref, current(ref))]
        if changed:
            raise ResumeRefused(
                "evidence_changed",
                f"{len(changed)} document(s) changed since the job read them: "
                f"{', '.join(changed[:MAX_DROPPED_NAMED])}",
            )


def _same_document(recorded: DocumentRef, now: object) -> bool:
    if now is None:
        return False
    if not isinstance(now, DocumentRef):
        raise InvalidArgument(
            f"current_version must return a tenure.DocumentRef or None, got {type(now).__name__}"
        )
    return now.version == recorded.version and now.sha256 == recorded.sha256
