"""The public Ledger: validated, logged operations over a Store, made of one part per aggregate.

Each part is an object the ledger makes in its `__init__`, owning its own state, and the
ledger's methods are its parts' (`forward`):
- `core`: the store, settings, lifecycle, and `ownership_unknown` events held back in an outage
  (every part holds the one core);
- `submission`: submit, submit_or_find, submit_many (uses `rollouts` and `declarations`);
- `leases`: the lease protocol (claim, extend, stages, complete, fail, release; uses `limits`);
- `reading`: get, list, events, stages, wait, figures; cancel and requeue;
- `limits`: per-tenant concurrency limits; `tenants`: tenants and API keys;
- `rollouts`: variants and their rollouts; `declarations`: declared labels and versions;
- `retention`: purge;
- `evidence`: references a lease records, and the retrieval cache (uses `leases`);
- `waits`: signals, children, and the wait that settles or suspends a job (uses `submission`,
  `leases`, `reading`).
"""

from __future__ import annotations

from typing import Any, Self

from tenure.ledger.awaiting import await_end
from tenure.ledger.core import DEFAULT_MAX_ATTEMPTS, LedgerCore, backoff_delay, forward
from tenure.ledger.declarations import Declarations
from tenure.ledger.evidence import EvidenceRecords
from tenure.ledger.leases import Leases, pinned_variants
from tenure.ledger.limits import Limits
from tenure.ledger.reading import MAX_LIST_LIMIT, Reading
from tenure.ledger.retention import DEFAULT_KEY_RETENTION, Retention
from tenure.ledger.rollouts import Rollouts, RolloutStatus, VariantFigures, p95, share_of
from tenure.ledger.submission import MAX_BATCH, Submission
from tenure.ledger.tenants import Principal, Tenants
from tenure.ledger.waits import Waits
from tenure.storage import Store, open_store
from tenure.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_seconds

__all__ = [
    "DEFAULT_KEY_RETENTION",
    "DEFAULT_MAX_ATTEMPTS",
    "MAX_BATCH",
    "MAX_LIST_LIMIT",
    "Ledger",
    "Principal",
    "RolloutStatus",
    "VariantFigures",
    "await_end",
    "backoff_delay",
    "connect",
    "p95",
    "pinned_variants",
    "share_of",
]


class Ledger:
    """Durable, leased, fenced jobs. Create one with `tenure.connect(url)`.

    Every write that acts for a lease is conditional on the lease still being held by the
    database's clock; zero rows raise `LeaseLost` and are recorded as `result_rejected` (or
    `heartbeat_lost`). A database that cannot be reached during a lease operation raises
    `OwnershipUnknown`.

    The ledger is made of parts, one per aggregate, each owning its state (caches, locks); the
    methods below are theirs.
    """

    def __init__(self, store: Store, **settings: Any) -> None:
        core = LedgerCore(store, **settings)
        self._core = core
        self.store = store
        self.ended = core.ended
        self._limits = Limits(core)
        self._leases = Leases(core, self._limits)
        self._reading = Reading(core)
        self._rollouts = Rollouts(core)
        self._declarations = Declarations(core)
        self._submission = Submission(core, self._rollouts, self._declarations)
        self._waits = Waits(core, self._submission, self._leases, self._reading)
        self._tenants = Tenants(core)
        self._evidence = EvidenceRecords(core, self._leases)
        self._retention = Retention(core)

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload, result or checkpoint accepted (bytes of JSON)."""
        return self._core.max_payload_bytes

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    migrate = forward("_core", LedgerCore.migrate)
    close = forward("_core", LedgerCore.close)
    now = forward("_core", LedgerCore.now)
    report_unconfirmed = forward("_core", LedgerCore.report_unconfirmed)

    submit = forward("_submission", Submission.submit)
    submit_or_find = forward("_submission", Submission.submit_or_find)
    submit_many = forward("_submission", Submission.submit_many)
    on_claimable = forward("_submission", Submission.on_claimable)

    claim = forward("_leases", Leases.claim)
    claim_many = forward("_leases", Leases.claim_many)
    complete_and_claim = forward("_leases", Leases.complete_and_claim)
    extend = forward("_leases", Leases.extend)
    extend_many = forward("_leases", Leases.extend_many)
    save_step = forward("_leases", Leases.save_step)
    complete = forward("_leases", Leases.complete)
    complete_many = forward("_leases", Leases.complete_many)
    fail = forward("_leases", Leases.fail)
    release = forward("_leases", Leases.release)
    start_stage = forward("_leases", Leases.start_stage)
    stage_raised = forward("_leases", Leases.stage_raised)
    finish_stage = forward("_leases", Leases.finish_stage)
    lost_reason = forward("_leases", Leases.lost_reason)
    record = forward("_leases", Leases.record)

    cancel = forward("_reading", Reading.cancel)
    requeue = forward("_reading", Reading.requeue)
    get = forward("_reading", Reading.get)
    events = forward("_reading", Reading.events)
    stages = forward("_reading", Reading.stages)
    list = forward("_reading", Reading.list)
    counts = forward("_reading", Reading.counts)
    wait = forward("_reading", Reading.wait)
    queue_figures = forward("_reading", Reading.queue_figures)
    overdue_stages = forward("_reading", Reading.overdue_stages)
    event_totals = forward("_reading", Reading.event_totals)

    signal = forward("_waits", Waits.signal)
    release_held = forward("_waits", Waits.release_held)
    children = forward("_waits", Waits.children)
    spawn = forward("_waits", Waits.spawn)
    wait_on = forward("_waits", Waits.wait_on)

    set_tenant_limit = forward("_limits", Limits.set_tenant_limit)
    tenant_limits = forward("_limits", Limits.tenant_limits)
    has_tenant_limits = forward("_limits", Limits.has_tenant_limits)

    create_tenant = forward("_tenants", Tenants.create_tenant)
    issue_key = forward("_tenants", Tenants.issue_key)
    revoke_keys = forward("_tenants", Tenants.revoke_keys)
    tenants = forward("_tenants", Tenants.tenants)
    authenticate = forward("_tenants", Tenants.authenticate)
    identify = forward("_tenants", Tenants.identify)

    declare_labels = forward("_declarations", Declarations.declare_labels)
    declare_versions = forward("_declarations", Declarations.declare_versions)
    declared_labels = forward("_declarations", Declarations.declared_labels)

    start_rollout = forward("_rollouts", Rollouts.start_rollout)
    stop_rollout = forward("_rollouts", Rollouts.stop_rollout)
    rollouts = forward("_rollouts", Rollouts.rollouts)
    rollout = forward("_rollouts", Rollouts.rollout)
    rollout_status = forward("_rollouts", Rollouts.rollout_status)
    rollout_statuses = forward("_rollouts", Rollouts.rollout_statuses)
    check_rollout = forward("_rollouts", Rollouts.check_rollout)
    job_cost = forward("_rollouts", Rollouts.job_cost)
    report_cost = forward("_rollouts", Rollouts.report_cost)

    record_evidence = forward("_evidence", EvidenceRecords.record_evidence)
    evidence = forward("_evidence", EvidenceRecords.evidence)
    cached_refs = forward("_evidence", EvidenceRecords.cached_refs)
    cache_refs = forward("_evidence", EvidenceRecords.cache_refs)
    retrieval_totals = forward("_evidence", EvidenceRecords.retrieval_totals)
    record_retrieval = forward("_evidence", EvidenceRecords.record_retrieval)

    purge = forward("_retention", Retention.purge)


def connect(
    url: str,
    *,
    migrate: bool = True,
    timeout: float = 5.0,
    pool_size: int = 4,
    listen_url: str | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff_base: float = 1.0,
    backoff_cap: float = 300.0,
) -> Ledger:
    """Open the ledger at `url` (`sqlite:///file.db` or `postgresql://…`) and migrate it.

    `timeout` bounds connecting and each statement (seconds); a lease operation that exceeds
    it raises `OwnershipUnknown`. `listen_url` names a direct PostgreSQL connection for LISTEN
    when `url` goes through a transaction pooler (default: `$TENURE_LISTEN_URL`; without
    either, workers and waiters poll there).
    """
    ledger = Ledger(
        open_store(
            url,
            timeout=check_seconds(timeout, "timeout"),
            pool_size=pool_size,
            listen_url=listen_url,
        ),
        max_payload_bytes=max_payload_bytes,
        default_max_attempts=default_max_attempts,
        backoff_base=backoff_base,
        backoff_cap=backoff_cap,
    )
    if migrate:
        try:
            ledger.migrate()
        except BaseException:
            ledger.close()
            raise
    return ledger
