"""The evidence aggregate of the store: references a job recorded (written with its lease),
the per-tenant cache of retrieval results, and the class versions apps declare."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tenure.evidence import Evidence
from tenure.types import JSON, Lease, RetrievalTotals


@dataclass(frozen=True, slots=True)
class NewEvidence:
    """A reference to record, as canonical JSON with its digest (one row per reference)."""

    type: str
    ref_json: str
    ref_sha256: str
    retriever: str | None


@dataclass(frozen=True, slots=True)
class CachedRetrieval:
    """A cache entry to write: the refs (canonical JSON list) under (tenant, key)."""

    tenant: str
    key: str
    retriever: str
    refs_json: str
    ttl_seconds: float


class EvidenceStore(Protocol):
    """Evidence, the retrieval cache and class versions. Part of `Store`."""

    def record_evidence(self, lease: Lease, evidence: NewEvidence) -> bool:
        """Record a reference if the lease still holds (False: it does not)."""
        ...

    def evidence(self, job_id: str) -> list[Evidence]:
        """A job's recorded references, in the order first recorded."""
        ...

    def cached_retrieval(self, tenant: str, key: str) -> JSON:
        """The refs (a list of reference objects) cached for this tenant under `key`, if not
        expired; else None."""
        ...

    def cache_retrieval(self, entry: CachedRetrieval) -> None:
        """Store (or replace) a cache entry, expiring `ttl_seconds` from the database's now."""
        ...

    def purge_retrievals(self, older_than: float) -> int:
        """Delete cache entries expired or older than `older_than` seconds; how many."""
        ...

    def retrieval_totals(self) -> list[RetrievalTotals]:
        """Hits, misses and dropped refs per retriever, from the `evidence_retrieved` events."""
        ...

    def declare_versions(self, versions_json: str) -> None:
        """Store each kind's class version (a JSON object kind -> version)."""
        ...
