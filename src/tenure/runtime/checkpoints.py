"""Checkpoint envelopes: what a worker-run job's checkpoint holds, and how a checkpoint written
by older code is brought up to the handler's version before the job resumes.

The envelope (`Job.checkpoint`), rewritten with each recorded stage:

    {"schema_version": 3, "handler_version": 3, "tenant": "acme", "job_id": "…",
     "state": "running",
     "stages": [{"position": 0, "name": "fetch", "kind": "step", "result": …}, …],
     "effects": {"email": "done"}, "evidence": ["s3://…#v7"], "approvals": [{…}],
     "original": {"schema_version": 2, "checkpoint": {…}}}      # after a migration

`schema_version` is the job class's `version` when the envelope was written. An older one is
migrated by the registered pure functions, one version at a time, and the first original is
kept under "original"; a newer one, or one with no path of migrations, fails the job (the
code cannot read it) instead of being misread.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tenure.app import JobClass, Migration
from tenure.errors import NonRetryable
from tenure.types import Lease, Stage, StageStatus


class CheckpointRefused(NonRetryable):
    """The job's checkpoint cannot be read by this code: the job fails with `code`."""


def new_envelope(lease: Lease, job_class: JobClass) -> dict[str, Any]:
    """The envelope of a job that has recorded nothing yet."""
    return {
        "schema_version": job_class.version,
        "handler_version": job_class.version,
        "tenant": lease.tenant,
        "job_id": lease.job_id,
        "state": "running",
        "stages": [],
        "effects": {},
        "evidence": [],
        "approvals": [],
    }


def stored_envelope(lease: Lease, job_class: JobClass, stages: list[Stage]) -> dict[str, Any]:
    """The envelope the job was saved with; for a job whose stages were recorded before
    envelopes existed, one built from those stages, as version 1."""
    stored = lease.checkpoint
    if isinstance(stored, dict) and "schema_version" in stored:
        return copy.deepcopy(stored)
    envelope = new_envelope(lease, job_class)
    envelope["schema_version"] = envelope["handler_version"] = 1
    for stage in stages:
        if stage.status is StageStatus.DONE:
            envelope["stages"].append(
                {
                    "position": stage.position,
                    "name": stage.name,
                    "kind": stage.kind.value,
                    "result": stage.result,
                }
            )
        if stage.kind.value == "effect":
            envelope["effects"][stage.name] = stage.status.value
    return envelope


def bring_up_to_date(
    envelope: dict[str, Any], job_class: JobClass, migrations: Mapping[int, Migration]
) -> tuple[dict[str, Any], int | None]:
    """The envelope at the class's version, and the version it was migrated from (None when
    it already was current). Raises `CheckpointRefused` when it cannot be read."""
    version = envelope.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CheckpointRefused(
            f"schema_version {version!r} is not a version", "checkpoint_malformed"
        )
    if version > job_class.version:
        raise CheckpointRefused(
            f"the checkpoint was written by version {version} of {job_class.kind!r}; this "
            f"code is version {job_class.version} and cannot read it",
            "checkpoint_too_new",
        )
    if version == job_class.version:
        return envelope, None
    original = envelope.get("original") or {
        "schema_version": version,
        "checkpoint": {k: v for k, v in envelope.items() if k != "original"},
    }
    current = {k: v for k, v in envelope.items() if k != "original"}
    for step in range(version, job_class.version):
        migration = migrations.get(step)
        if migration is None:
            raise CheckpointRefused(
                f"no checkpoint migration of {job_class.kind!r} from version {step}",
                "checkpoint_unmigratable",
            )
        current = migration(copy.deepcopy(current))
        if not isinstance(current, dict):
            raise CheckpointRefused(
                f"the migration of {job_class.kind!r} from version {step} returned "
                f"{type(current).__name__}, not a dict",
                "checkpoint_malformed",
            )
        current["schema_version"] = step + 1
    current["handler_version"] = job_class.version
    current["original"] = original
    return current, version


def replay_results(stages: list[Stage], envelope: Mapping[str, Any]) -> list[Stage]:
    """The recorded stages with the (possibly migrated) results of the envelope: a resumed
    handler gets back what the checkpoint now says."""
    results = {
        entry.get("position"): entry.get("result")
        for entry in envelope.get("stages", [])
        if isinstance(entry, dict)
    }
    return [
        replace(stage, result=results[stage.position])
        if stage.status is StageStatus.DONE and stage.position in results
        else stage
        for stage in stages
    ]
