-- tenure schema, version 6 (PostgreSQL): runs that wait without holding a lease.
-- A `waiting` job holds no lease; it is claimable once run_after (its timer, its wait's timeout,
-- or the moment a signal or an awaited child ended) has passed. `wait` says what it waits for.
ALTER TABLE tenure_jobs DROP CONSTRAINT tenure_jobs_state_check;
ALTER TABLE tenure_jobs ADD CONSTRAINT tenure_jobs_state_check
    CHECK (state IN ('queued', 'running', 'waiting', 'succeeded', 'failed', 'cancelled'));
ALTER TABLE tenure_jobs ADD COLUMN parent_id uuid;
ALTER TABLE tenure_jobs ADD COLUMN wait jsonb;
-- The claim finds due waits on this index; waits far in the future cost it nothing.
CREATE INDEX tenure_jobs_waiting ON tenure_jobs (run_after) WHERE state = 'waiting';
CREATE INDEX tenure_jobs_parent ON tenure_jobs (parent_id) WHERE parent_id IS NOT NULL;

ALTER TABLE tenure_stages DROP CONSTRAINT tenure_stages_kind_check;
ALTER TABLE tenure_stages ADD CONSTRAINT tenure_stages_kind_check
    CHECK (kind IN ('step', 'effect', 'wait'));

-- One signal per job and name: the first wins.
CREATE TABLE tenure_signals (
    job_id         uuid        NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    name           text        NOT NULL,
    payload        jsonb,
    payload_sha256 text        NOT NULL,
    at             timestamptz NOT NULL,
    PRIMARY KEY (job_id, name)
);
