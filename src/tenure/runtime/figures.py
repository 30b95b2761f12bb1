"""What `tenure worker --metrics-port` reads of a worker: `tenure.service.metrics.WorkerFigures`."""

from __future__ import annotations

from typing import Any

from tenure.labels import JobCounts, JobSpend
from tenure.runtime.worker import Worker


class WorkerFigures:
    """A worker's figures for its Prometheus collector."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self.worker_id = worker.worker_id

    @property
    def claim_latency(self) -> Any:
        return self._worker.claim_latency

    @property
    def stats(self) -> dict[str, int]:
        return self._worker.stats

    @property
    def running(self) -> int:
        return self._worker.running

    @property
    def job_counts(self) -> JobCounts:
        """The counters of what happened to jobs, by (counter, kind, sorted labels)."""
        keeper = self._worker.keeper
        return {} if keeper is None else keeper.job_counts()

    @property
    def job_spend(self) -> JobSpend:
        """What the worker's jobs reported spending, by (kind, unit, sorted labels)."""
        keeper = self._worker.keeper
        return {} if keeper is None else keeper.job_spend()

    @property
    def class_labels(self) -> dict[str, dict[str, str]]:
        """The labels of each kind the worker runs, as its class declares them."""
        classes = self._worker.app.job_classes
        return {kind: classes[kind].labels_of(None) for kind in self._worker.kinds}
