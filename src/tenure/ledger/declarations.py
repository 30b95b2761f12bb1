"""What job classes declare to every process that shares the database: their labels.

A submit does not know job classes (the CLI, HTTP and a plain ledger have none), so an app
writes its classes' label declarations when it connects (`App.connect`), and a submit with
labels is checked against them. The declarations are read again at most once a second, and at
once when a submit names a kind or key not yet seen.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Protocol

from tenure import labels as label_rules
from tenure.ledger.core import LedgerCore, Part
from tenure.storage.base import TenantStore
from tenure.storage.evidence import EvidenceStore
from tenure.validation import check_int, check_name

DECLARATIONS_CACHE = 1.0


class DeclarationStore(TenantStore, EvidenceStore, Protocol):
    """What `Declarations` uses of the store: the labels and versions the classes declare."""


class Declarations(Part[DeclarationStore]):
    """`declare_labels`, `declared_labels` and the check of a submit's labels."""

    def __init__(self, core: LedgerCore, store: DeclarationStore) -> None:
        super().__init__(core, store)
        # This ledger's own cache of the declared labels (never shared with another ledger).
        self._declared: tuple[float, dict[str, label_rules.Declared]] | None = None
        self._declared_lock = threading.Lock()

    def declare_labels(self, kinds: Mapping[str, Mapping[str, str | None]]) -> None:
        """Store, for each kind, the labels its job class declares: a fixed value, or None for
        a key each submit may set. Written only where it changed."""
        checked = {
            check_name(kind, "kind"): label_rules.check_declared(declared, f"kind {kind!r}")
            for kind, declared in kinds.items()
        }
        if not checked:
            return
        self.store.declare_labels(json.dumps(checked, sort_keys=True))
        with self._declared_lock:
            self._declared = None

    def declare_versions(self, kinds: Mapping[str, int]) -> None:
        """Store, for each kind, its job class's version: a job submitted afterwards, from any
        process, keeps it (`Job.version`, and every event's `version`). Written where changed."""
        checked = {
            check_name(kind, "kind"): check_int(version, f"version of kind {kind!r}", 1)
            for kind, version in kinds.items()
        }
        if checked:
            self.store.declare_versions(json.dumps(checked, sort_keys=True))

    def declared_labels(self, *, fresh: bool = False) -> dict[str, label_rules.Declared]:
        """Every kind's declared labels (read again after a second, or now with `fresh`)."""
        with self._declared_lock:
            cached = self._declared
        if (
            not fresh
            and cached is not None
            and self.core.clock.monotonic() - cached[0] < DECLARATIONS_CACHE
        ):
            return cached[1]
        current = self.store.declared_labels()
        with self._declared_lock:
            self._declared = (self.core.clock.monotonic(), current)
        return current

    def submitted_labels(self, kind: str, labels: object) -> str | None:
        """A submit's labels checked against its kind's declaration, as canonical JSON."""
        if labels is None:
            return None
        declared = self.declared_labels().get(kind)
        if declared is None or not set(_keys(labels)) <= set(declared):
            declared = self.declared_labels(fresh=True).get(kind)  # declared a moment ago?
        checked = label_rules.check_submitted(labels, declared, kind)
        return json.dumps(checked, sort_keys=True, separators=(",", ":")) if checked else None


def _keys(labels: object) -> list[object]:
    return list(labels) if isinstance(labels, Mapping) else []
