"""The evidence aggregate written once for both SQL dialects (named queries `evidence_*`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tenure.evidence import Evidence, reference_from
from tenure.storage.evidence import (
    CachedRetrieval,
    EvidenceStore,
    NewEvidence,
)
from tenure.storage.rows import Row, held_by
from tenure.storage.seam import SqlSeam
from tenure.types import Lease, RetrievalTotals


class SqlEvidence(EvidenceStore, SqlSeam):
    """`EvidenceStore` over the dialect seam of `SqlStore`."""

    def record_evidence(self, lease: Lease, evidence: NewEvidence) -> bool:
        params = {
            **held_by(lease),
            "attempt": lease.attempt,
            "type": evidence.type,
            "ref": evidence.ref_json,
            "ref_sha256": evidence.ref_sha256,
            "retriever": evidence.retriever,
        }
        return bool(self._write_rows("record_evidence", params))

    def evidence(self, job_id: str) -> list[Evidence]:
        rows = self._read_rows("evidence", {"job_id": job_id})
        return [
            evidence_from_row(row, self.decode.json(row["ref"]), self.decode.time(row["at"]))
            for row in rows
        ]

    def cached_retrieval(self, tenant: str, key: str) -> Any:
        rows = self._read_rows("cached_retrieval", {"tenant": tenant, "key": key})
        return self.decode.json(rows[0]["refs"]) if rows else None

    def cache_retrieval(self, entry: CachedRetrieval) -> None:
        params = {
            "tenant": entry.tenant,
            "key": entry.key,
            "retriever": entry.retriever,
            "refs": entry.refs_json,
            "ttl": entry.ttl_seconds,
        }
        self._write_rows("cache_retrieval", params)

    def purge_retrievals(self, older_than: float) -> int:
        return len(self._write_rows("purge_retrievals", {"older_than": older_than}))

    def retrieval_totals(self) -> list[RetrievalTotals]:
        return [
            RetrievalTotals(
                str(row["retriever"]), int(row["hits"]), int(row["misses"]), int(row["dropped"])
            )
            for row in self._read_rows("retrieval_totals")
        ]

    def declare_versions(self, versions_json: str) -> None:
        self._write_rows("declare_versions", {"versions": versions_json})


def evidence_from_row(row: Mapping[str, Any] | Row, ref: Any, at: datetime) -> Evidence:
    """An `Evidence` from a row of `evidence` (or an element of `get`'s evidence list)."""
    return Evidence(
        seq=int(row["seq"]),
        ref=reference_from(row["type"], ref),
        retriever=row["retriever"],
        token=int(row["token"]),
        attempt=int(row["attempt"]),
        at=at,
    )


def evidence_of_job(value: Any) -> tuple[Evidence, ...]:
    """The evidence list `get` aggregates (JSON: times as epoch seconds) as values."""
    if not isinstance(value, list):
        return ()
    return tuple(
        evidence_from_row(item, item["ref"], datetime.fromtimestamp(float(item["at"]), UTC))
        for item in value
    )
