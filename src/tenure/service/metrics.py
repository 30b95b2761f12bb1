"""Prometheus collectors: the queue from the database, a worker's own figures from the worker.

Database figures are read at scrape time (one query for states and leases, one for recovery
events), so any number of `tenure serve` processes report the same values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tenure.errors import StoreUnavailable
from tenure.ledger import Ledger


class ClaimLatency(Protocol):
    """A histogram of claim times (the worker's `claim_latency`)."""

    def snapshot(self) -> Any: ...


class WorkerFigures(Protocol):
    """What `tenure worker --metrics-port` exports of its worker (the service layer does not
    import the runtime: a `Worker` has these)."""

    worker_id: str

    @property
    def claim_latency(self) -> ClaimLatency: ...

    @property
    def stats(self) -> dict[str, int]: ...

    @property
    def running(self) -> int: ...


# (metric name, EventTotals field, help) for the counters read from recovery events.
_EVENT_COUNTERS = [
    ("tenure_leases_expired", "leases_expired", "leases that expired before their job ended"),
    ("tenure_jobs_reclaimed", "jobs_reclaimed", "expired leases taken over by another claim"),
    ("tenure_extension_failures", "extension_failures", "heartbeats the database refused"),
    ("tenure_results_rejected", "results_rejected", "writes refused for a stale token"),
    ("tenure_steps_in_doubt", "steps_in_doubt", "effects found started, not done, at recovery"),
    ("tenure_ownership_unknown", "ownership_unknown", "lease writes that met no database"),
]


def _gauge(name: str, help_text: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=labels)


class DatabaseCollector(Collector):
    """Jobs by state, lease and queue ages, and recovery event totals, by kind (and tenant)."""

    def __init__(self, ledger: Ledger, *, by_tenant: bool = False) -> None:
        self.ledger = ledger
        self.by_tenant = by_tenant

    def collect(self) -> Iterator[Metric]:
        labels = ["kind", "tenant"] if self.by_tenant else ["kind"]
        up = GaugeMetricFamily("tenure_database_up", "1 if the last scrape reached the database")
        try:
            figures = self.ledger.queue_figures(self.by_tenant)
            totals = self.ledger.event_totals(self.by_tenant)
        except StoreUnavailable:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up

        def key(kind: str, tenant: str | None) -> list[str]:
            return [kind, tenant or ""] if self.by_tenant else [kind]

        jobs = GaugeMetricFamily("tenure_jobs", "jobs by state", labels=[*labels, "state"])
        expired = _gauge("tenure_expired_leases", "running jobs past their lease", labels)
        heartbeat = _gauge(
            "tenure_heartbeat_age_seconds", "oldest heartbeat age of a running job", labels
        )
        remaining = _gauge(
            "tenure_lease_remaining_seconds", "least lease time left of a running job", labels
        )
        queued_age = _gauge(
            "tenure_oldest_queued_age_seconds", "how long the oldest due job has waited", labels
        )
        for f in figures:
            jobs.add_metric([*key(f.kind, f.tenant), f.state.value], f.jobs)
            if f.state.value == "running":
                expired.add_metric(key(f.kind, f.tenant), f.expired_leases)
                if f.oldest_heartbeat_age is not None:
                    heartbeat.add_metric(key(f.kind, f.tenant), f.oldest_heartbeat_age)
                if f.least_lease_remaining is not None:
                    remaining.add_metric(key(f.kind, f.tenant), f.least_lease_remaining)
            if f.state.value == "queued" and f.oldest_due_age is not None:
                queued_age.add_metric(key(f.kind, f.tenant), f.oldest_due_age)
        yield from (jobs, expired, heartbeat, remaining, queued_age)
        # Every kind the queue knows gets each counter, at zero until its first event: a rate()
        # over a series that appears only on the first failure misses that failure.
        by_group = {(t.kind, t.tenant): t for t in totals}
        groups = sorted({(f.kind, f.tenant) for f in figures} | set(by_group), key=str)
        for name, field, help_text in _EVENT_COUNTERS:
            counter = CounterMetricFamily(name, help_text, labels=labels)
            for kind, tenant in groups:
                found = by_group.get((kind, tenant))
                counter.add_metric(key(kind, tenant), getattr(found, field) if found else 0)
            yield counter


class WorkerCollector(Collector):
    """A worker's own counters, running jobs and claim latency (`tenure worker --metrics-port`)."""

    def __init__(self, worker: WorkerFigures) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        worker_id = self.worker.worker_id
        for name, value in sorted(self.worker.stats.items()):
            counter = CounterMetricFamily(
                f"tenure_worker_{name}", f"worker counter {name}", labels=["worker"]
            )
            counter.add_metric([worker_id], value)
            yield counter
        running = GaugeMetricFamily(
            "tenure_worker_running_jobs", "jobs this worker runs now", labels=["worker"]
        )
        running.add_metric([worker_id], self.worker.running)
        yield running
        latency = self.worker.claim_latency.snapshot()
        histogram = HistogramMetricFamily(
            "tenure_worker_claim_seconds",
            "time a claim statement took, from sending to the leases coming back",
            labels=["worker"],
        )
        histogram.add_metric([worker_id], latency.cumulative_buckets, latency.total_seconds)
        yield histogram
