"""Evidence: references a lease records (write-ahead, fenced by its token), a job's recorded
references, and the per-tenant cache of retrieval results."""

from __future__ import annotations

import builtins
import json
from dataclasses import asdict
from typing import Any, Protocol

from tenure.errors import JobNotFound
from tenure.evidence import (
    DocumentRef,
    Evidence,
    Reference,
    check_reference,
    reference_from,
    reference_json,
    reference_sha256,
)
from tenure.ledger.core import LedgerCore, Part
from tenure.ledger.leases import Leases
from tenure.storage.base import JobStore
from tenure.storage.evidence import (
    CachedRetrieval,
    EvidenceStore,
    NewEvidence,
)
from tenure.types import EventType, Lease, RetrievalTotals
from tenure.validation import check_job_id, check_name


class EvidenceRecordStore(EvidenceStore, JobStore, Protocol):
    """What `EvidenceRecords` uses of the store: evidence, the retrieval cache, the jobs."""


class EvidenceRecords(Part[EvidenceRecordStore]):
    """`record_evidence`, `evidence`, and the retrieval cache of the `Ledger`."""

    def __init__(self, core: LedgerCore, store: EvidenceRecordStore, leases: Leases) -> None:
        super().__init__(core, store)
        self.leases = leases

    def record_evidence(
        self, lease: Lease, ref: Reference, *, retriever: str | None = None
    ) -> None:
        """Record a reference for the lease's job while the lease holds (`LeaseLost` after:
        a stale owner adds no evidence). Recording the same reference again is one row."""
        ref = check_reference(ref)
        if retriever is not None:
            check_name(retriever, "retriever name")
        new = NewEvidence(ref.type, reference_json(ref), reference_sha256(ref), retriever)
        if not self.leases.guard(
            lease, "record_evidence", lambda: self.store.record_evidence(lease, new)
        ):
            self.leases.lost(lease, "record_evidence")

    def evidence(self, job_id: str) -> builtins.list[Evidence]:
        """The references a job recorded, in the order first recorded."""
        job_id = check_job_id(job_id)
        found = self.store.evidence(job_id)
        if not found and self.store.get(job_id) is None:
            raise JobNotFound(f"no job has the id {job_id}")
        return found

    def cached_refs(self, tenant: str, key: str) -> builtins.list[DocumentRef] | None:
        """The document refs cached for `tenant` under `key` (None: a miss). The lookup names
        the tenant: another tenant's entry is never read, whatever the key."""
        value = self.store.cached_retrieval(tenant, key)
        if not isinstance(value, list):
            return None
        refs = [reference_from("document", item) for item in value]
        return [ref for ref in refs if isinstance(ref, DocumentRef)]

    def cache_refs(
        self,
        tenant: str,
        key: str,
        retriever: str,
        refs: builtins.list[DocumentRef],
        ttl_seconds: float,
    ) -> None:
        """Cache a search's refs for `tenant` under `key` for `ttl_seconds`."""
        text = json.dumps([asdict(ref) for ref in refs], sort_keys=True, separators=(",", ":"))
        self.store.cache_retrieval(CachedRetrieval(tenant, key, retriever, text, ttl_seconds))

    def retrieval_totals(self) -> builtins.list[RetrievalTotals]:
        """Per retriever: cache hits, misses, and refs dropped by a recheck (all time)."""
        return self.store.retrieval_totals()

    def record_retrieval(self, /, lease: Lease, **detail: Any) -> None:
        """The `evidence_retrieved` event: retriever, cache hit or miss, refs returned and
        dropped by the recheck (their sources: ids, never content)."""
        self.leases.record(lease, EventType.EVIDENCE_RETRIEVED, **detail)
