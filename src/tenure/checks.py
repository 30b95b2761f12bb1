"""Resume checks to pass as `@app.job(..., resume_checks=[...])`: each runs before a job that
recorded stages resumes, and refuses the resume with `tenure.ResumeRefused(code, message)`."""

from __future__ import annotations

from typing import Any


def evidence_still_valid(ctx: Any, checkpoint: dict[str, Any]) -> None:
    """Refuse to resume a job whose evidence no longer holds: a document ref its retriever's
    recheck now drops for the job's principal (`evidence_revoked`), or one whose version or
    sha256 changed, by the retriever's `current_version` (`evidence_changed`). References
    recorded without a registered retriever are not judged."""
    ctx.recheck_evidence()
