"""Prometheus collectors: the queue from the database, a worker's own figures from the worker.

Database figures are read at scrape time (one query for states and leases, one for recovery
events), so any number of `tenure serve` processes report the same values.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tenure import labels as label_rules
from tenure.errors import StoreUnavailable
from tenure.labels import Declared, JobCounts, JobSpend
from tenure.ledger import Ledger, ScheduleRow
from tenure.types import (
    EventTotals,
    JobState,
    OverdueStages,
    QueueFigure,
    RetrievalTotals,
    WorkerCount,
)


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

    @property
    def job_counts(self) -> JobCounts:
        """Counters of what happened to jobs, by (counter, kind, sorted labels)."""
        ...

    @property
    def class_labels(self) -> Mapping[str, Mapping[str, str]]:
        """The labels of each kind the worker runs, as its class declares them."""
        ...

    @property
    def job_spend(self) -> JobSpend:
        """What its jobs reported spending, by (kind, unit, sorted labels)."""
        ...


# (metric name, EventTotals field, help) for the counters read from recovery events.
_EVENT_COUNTERS = [
    ("tenure_leases_expired", "leases_expired", "leases that expired before their job ended"),
    ("tenure_jobs_reclaimed", "jobs_reclaimed", "expired leases taken over by another claim"),
    ("tenure_extension_failures", "extension_failures", "heartbeats the database refused"),
    ("tenure_results_rejected", "results_rejected", "writes refused for a stale token"),
    ("tenure_steps_in_doubt", "steps_in_doubt", "effects found started, not done, at recovery"),
    ("tenure_ownership_unknown", "ownership_unknown", "lease writes that met no database"),
]


# Kinds with a series of their own on /metrics (those with the most jobs); the rest: `other`.
MAX_KINDS = 50


class _Series:
    """How a group of jobs (kind, tenant, a job's submitted labels) becomes a series: its
    class's fixed labels added, every key present (empty where a kind has none), and values
    past `MAX_VALUES_PER_KEY` distinct ones of a key folded into `other`."""

    def __init__(
        self,
        declared: dict[str, Declared],
        groups: list[tuple[str, dict[str, str] | None, int]],
        by_tenant: bool,
    ) -> None:
        self.declared = declared
        self.by_tenant = by_tenant
        full = [(label_rules.merged(declared.get(k), s), weight) for k, s, weight in groups]
        self.keys = sorted(
            {key for labels, _ in full for key in labels}
            | {key for labels in declared.values() for key in labels}
        )
        self.kept = label_rules.fold(full, label_rules.MAX_VALUES_PER_KEY)
        # Kinds are folded too: a database of thousands of kinds must not make /metrics grow
        # with each (nor list them all to whoever may read it).
        self.kinds = label_rules.fold(
            [({"kind": kind}, weight) for kind, _, weight in groups], MAX_KINDS
        ).get("kind", set())
        self.names = ["kind", "tenant", *self.keys] if by_tenant else ["kind", *self.keys]

    def key(self, kind: str, tenant: str | None, submitted: dict[str, str] | None) -> Key:
        labels = label_rules.folded(
            label_rules.merged(self.declared.get(kind), submitted), self.kept
        )
        values = [labels.get(key, "") for key in self.keys]
        shown = kind if kind in self.kinds else label_rules.OTHER
        return (shown, tenant or "", *values) if self.by_tenant else (shown, *values)


Key = tuple[str, ...]


class DatabaseCollector(Collector):
    """Jobs by state, lease and queue ages, recovery event totals and overdue stages, by kind
    and labels (and tenant)."""

    def __init__(self, ledger: Ledger, *, by_tenant: bool = False) -> None:
        self.ledger = ledger
        self.by_tenant = by_tenant

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("tenure_database_up", "1 if the last scrape reached the database")
        try:
            figures = self.ledger.operations.queue_figures(self.by_tenant)
            totals = self.ledger.operations.event_totals(self.by_tenant)
            overdue = self.ledger.operations.overdue_stages(self.by_tenant)
            declared = self.ledger.operations.declared_labels()
            retrievals = self.ledger.operations.retrieval_totals()
            schedules = self.ledger.operations.schedules.list()
        except StoreUnavailable:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        series = _Series(
            declared,
            [(f.kind, f.labels, f.jobs) for f in figures]
            + [(t.kind, t.labels, 0) for t in totals]
            + [(o.kind, o.labels, o.stages) for o in overdue],
            self.by_tenant,
        )
        yield from self._queue(figures, series)
        running = {
            series.key(f.kind, f.tenant, f.labels) for f in figures if f.state is JobState.RUNNING
        }
        yield from self._overdue(overdue, series, running)
        yield from self._events(figures, totals, series)
        yield from _retrievals(retrievals)
        yield from _schedules(schedules)

    def _queue(self, figures: list[QueueFigure], series: _Series) -> Iterator[Metric]:
        names = series.names
        jobs: Counter[Key] = Counter()
        expired: Counter[Key] = Counter()
        heartbeat: dict[Key, float] = {}
        remaining: dict[Key, float] = {}
        queued_age: dict[Key, float] = {}
        for f in figures:
            key = series.key(f.kind, f.tenant, f.labels)
            jobs[(*key, f.state.value)] += f.jobs
            if f.state is JobState.RUNNING:
                expired[key] += f.expired_leases
                _keep(heartbeat, key, f.oldest_heartbeat_age, max)
                _keep(remaining, key, f.least_lease_remaining, min)
            if f.state is JobState.QUEUED:
                _keep(queued_age, key, f.oldest_due_age, max)
        yield _family(GaugeMetricFamily, "tenure_jobs", "jobs by state", [*names, "state"], jobs)
        yield _family(
            GaugeMetricFamily, "tenure_expired_leases", "running jobs past their lease",
            names, expired,
        )  # fmt: skip
        yield _family(
            GaugeMetricFamily, "tenure_heartbeat_age_seconds",
            "oldest heartbeat age of a running job", names, heartbeat,
        )  # fmt: skip
        yield _family(
            GaugeMetricFamily, "tenure_lease_remaining_seconds",
            "least lease time left of a running job", names, remaining,
        )  # fmt: skip
        yield _family(
            GaugeMetricFamily, "tenure_oldest_queued_age_seconds",
            "how long the oldest due job has waited", names, queued_age,
        )  # fmt: skip

    def _overdue(
        self, overdue: list[OverdueStages], series: _Series, running: set[Key]
    ) -> Iterator[Metric]:
        stages: Counter[Key] = Counter({key: 0 for key in running})  # at zero while running
        most: dict[Key, float] = {}
        for o in overdue:
            key = series.key(o.kind, o.tenant, o.labels)
            stages[key] += o.stages
            _keep(most, key, o.most_overdue_seconds, max)
        yield _family(
            GaugeMetricFamily, "tenure_stages_overdue",
            "steps and effects of running jobs still started past their stage timeout",
            series.names, stages,
        )  # fmt: skip
        yield _family(
            GaugeMetricFamily, "tenure_stage_overdue_seconds",
            "how far the most overdue running stage is past its stage timeout",
            series.names, most,
        )  # fmt: skip

    def _events(
        self, figures: list[QueueFigure], totals: list[EventTotals], series: _Series
    ) -> Iterator[Metric]:
        # Every group the queue knows gets each counter, at zero until its first event: a
        # rate() over a series that appears only on the first failure misses that failure.
        known = {series.key(f.kind, f.tenant, f.labels) for f in figures}
        for name, field, help_text in _EVENT_COUNTERS:
            counts: Counter[Key] = Counter({key: 0 for key in known})
            for t in totals:
                counts[series.key(t.kind, t.tenant, t.labels)] += getattr(t, field)
            yield _family(CounterMetricFamily, name, help_text, series.names, counts)


def _retrievals(totals: list[RetrievalTotals]) -> Iterator[Metric]:
    """Lookups by retriever and cache outcome, and refs a recheck dropped, by retriever."""
    lookups: dict[Key, float] = {
        (t.retriever, outcome): n
        for t in totals
        for outcome, n in (("hit", t.hits), ("miss", t.misses))
    }
    dropped: dict[Key, float] = {(t.retriever,): t.dropped for t in totals}
    yield _family(
        CounterMetricFamily,
        "tenure_retrievals",
        "ctx.retrieve calls, by retriever and whether the cache answered (hit) or a search (miss)",
        ["retriever", "cache"],
        lookups,
    )
    yield _family(
        CounterMetricFamily,
        "tenure_retrieval_refs_dropped",
        "refs a retriever's recheck dropped before they were returned (a revoked permission)",
        ["retriever"],
        dropped,
    )


def _schedules(rows: list[ScheduleRow]) -> Iterator[Metric]:
    """Slots fired and missed, by scheduled kind (a fleet declares a handful of schedules)."""
    for name, what, field in (
        ("tenure_schedule_fired", "slots of a schedule whose job was submitted", "fired"),
        ("tenure_schedule_missed", "slots of a schedule that passed with no job", "missed"),
    ):
        counts: dict[Key, float] = {(row.kind,): getattr(row, field) for row in rows}
        yield _family(CounterMetricFamily, name, what, ["kind"], counts)


def _keep(
    values: dict[Key, float], key: Key, value: float | None, pick: Callable[..., float]
) -> None:
    if value is not None:
        values[key] = pick(values[key], value) if key in values else value


def _family(
    kind: Callable[..., Any],
    name: str,
    help_text: str,
    labels: list[str],
    values: Mapping[Key, float],
) -> Metric:
    family: Any = kind(name, help_text, labels=labels)
    for key in sorted(values):
        family.add_metric(list(key), values[key])
    return family  # type: ignore[no-any-return]


# Worker counters of what happened to jobs: by kind and labels. The others (statements made)
# are the worker's alone.
_PER_JOB = frozenset(count for count in WorkerCount if count.per_job)


class WorkerCollector(Collector):
    """A worker's own counters (those of jobs by kind and labels), running jobs and claim
    latency (`tenure worker --metrics-port`)."""

    def __init__(self, worker: WorkerFigures) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        worker_id = self.worker.worker_id
        counts = self.worker.job_counts
        classes = self.worker.class_labels
        full = [(dict(items), n) for (_, _, items), n in counts.items()]
        full += [(dict(labels), 0) for labels in classes.values()]
        keys = sorted({key for labels, _ in full for key in labels})
        kept = label_rules.fold(full, label_rules.MAX_VALUES_PER_KEY)

        def key(kind: str, labels: Mapping[str, str]) -> Key:
            folded = label_rules.folded(labels, kept)
            return (worker_id, kind, *(folded.get(k, "") for k in keys))

        stats = self.worker.stats
        for name in sorted(set(stats) | _PER_JOB):
            help_text = f"worker counter {name}"
            if name not in _PER_JOB:
                yield _family(
                    CounterMetricFamily, f"tenure_worker_{name}", help_text, ["worker"],
                    {(worker_id,): stats[name]},
                )  # fmt: skip
                continue
            values: Counter[Key] = Counter({key(kind, c): 0 for kind, c in classes.items()})
            for (counted, kind, items), n in counts.items():
                if counted == name:
                    values[key(kind, dict(items))] += n
            yield _family(
                CounterMetricFamily, f"tenure_worker_{name}", help_text,
                ["worker", "kind", *keys], values,
            )  # fmt: skip
        spend: dict[Key, float] = {}
        for (kind, unit, items), amount in self.worker.job_spend.items():
            at = (*key(kind, dict(items)), unit)
            spend[at] = spend.get(at, 0.0) + amount
        yield _family(
            CounterMetricFamily, "tenure_worker_spend", "what the worker's jobs reported "
            "spending (ctx.report_cost), in the app's units", ["worker", "kind", *keys, "unit"],
            spend,
        )  # fmt: skip
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
