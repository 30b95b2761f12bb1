"""The ledger's implementation of the worker's port (`tenure.port.LeasePort`): the lease
protocol, stages, waits and evidence of the ledger's parts, for the worker runtime alone.

Each of its calls is the method of the part that owns it, bound here once: the part's
signature is the port's (mypy checks it against `LeasePort` where `lease_port` returns it)."""

from __future__ import annotations

from tenure.ledger.core import LedgerCore
from tenure.ledger.evidence import EvidenceRecords
from tenure.ledger.leases import Leases
from tenure.ledger.limits import Limits
from tenure.ledger.reading import Reading
from tenure.ledger.rollouts import Rollouts
from tenure.ledger.submission import Submission
from tenure.ledger.waits import Waits
from tenure.storage import Store


class LedgerPort:
    """`LeasePort` over a ledger's parts (get it with `tenure.ledger.lease_port(ledger)`)."""

    def __init__(
        self,
        core: LedgerCore,
        store: Store,
        *,
        leases: Leases,
        limits: Limits,
        reading: Reading,
        submission: Submission,
        waits: Waits,
        rollouts: Rollouts,
        evidence: EvidenceRecords,
    ) -> None:
        self._store = store
        self.max_payload_bytes = core.max_payload_bytes
        self.now, self.close = core.now, core.close
        self.report_unconfirmed = core.report_unconfirmed
        self.on_claimable = submission.on_claimable
        self.has_tenant_limits = limits.has_tenant_limits
        self.claim_many, self.complete_and_claim = leases.claim_many, leases.complete_and_claim
        self.extend_many, self.lost_reason = leases.extend_many, leases.lost_reason
        self.save_step, self.start_stage = leases.save_step, leases.start_stage
        self.stage_raised, self.finish_stage = leases.stage_raised, leases.finish_stage
        self.complete, self.complete_many = leases.complete, leases.complete_many
        self.fail, self.release, self.record = leases.fail, leases.release, leases.record
        self.rate_limited, self.hold_for_budget = leases.rate_limited, leases.hold_for_budget
        self.get = reading.get
        self.stages = store.stages
        self.spawn, self.wait_on = waits.spawn, waits.wait_on
        self.report_cost = rollouts.report_cost
        self.budget = rollouts.budget
        self.record_evidence, self.evidence = evidence.record_evidence, evidence.evidence
        self.cached_refs, self.cache_refs = evidence.cached_refs, evidence.cache_refs
        self.record_retrieval = evidence.record_retrieval

    @property
    def where(self) -> str:
        return self._store.where

    @property
    def parallel_writes(self) -> bool:
        return self._store.parallel_writes
