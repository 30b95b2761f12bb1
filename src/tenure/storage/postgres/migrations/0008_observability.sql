-- tenure schema, version 8 (PostgreSQL): observability. A job keeps the labels its submit set
-- and the trace it was submitted in; a stage keeps its timeout, so a stage running past it can
-- be counted from the database even when its worker is hung; job classes declare their labels.
ALTER TABLE tenure_jobs ADD COLUMN labels jsonb;
ALTER TABLE tenure_jobs ADD COLUMN traceparent text;
ALTER TABLE tenure_stages ADD COLUMN timeout_seconds double precision;
CREATE INDEX tenure_stages_started ON tenure_stages (started_at) WHERE status = 'started';

CREATE TABLE tenure_kinds (
    kind       text PRIMARY KEY,
    labels     jsonb NOT NULL,
    updated_at timestamptz NOT NULL
);
