-- tenure schema, version 8 (SQLite): observability. A job keeps the labels its submit set and
-- the trace it was submitted in; a stage keeps its timeout, so a stage running past it can be
-- counted from the database even when its worker is hung; job classes declare their labels.
ALTER TABLE tenure_jobs ADD COLUMN labels TEXT;
ALTER TABLE tenure_jobs ADD COLUMN traceparent TEXT;
ALTER TABLE tenure_stages ADD COLUMN timeout_seconds REAL;
CREATE INDEX tenure_stages_started ON tenure_stages (started_at) WHERE status = 'started';

CREATE TABLE tenure_kinds (
    kind       TEXT PRIMARY KEY,
    labels     TEXT NOT NULL,
    updated_at REAL NOT NULL
);
