-- tenure schema, version 6 (SQLite): runs that wait without holding a lease.
-- SQLite cannot alter a CHECK constraint; widening one (a new allowed value) does not change how
-- rows are stored, so the table definitions are rewritten in place, the procedure SQLite's
-- documentation gives for it ("ALTER TABLE", section "making other kinds of table schema
-- changes"). The store then raises the schema version so that every connection re-reads it
-- (migrate() does that for a migration that says writable_schema). The rewrite comes last:
-- until the version is raised, this connection's parse of the old text is what ALTER TABLE
-- would edit.
ALTER TABLE tenure_jobs ADD COLUMN parent_id TEXT;
ALTER TABLE tenure_jobs ADD COLUMN wait TEXT;
CREATE INDEX tenure_jobs_waiting ON tenure_jobs (run_after) WHERE state = 'waiting';
CREATE INDEX tenure_jobs_parent ON tenure_jobs (parent_id) WHERE parent_id IS NOT NULL;

CREATE TABLE tenure_signals (
    job_id         TEXT NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    name           TEXT NOT NULL,
    payload        TEXT,
    payload_sha256 TEXT NOT NULL,
    at             REAL NOT NULL,
    PRIMARY KEY (job_id, name)
);

PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, 'CHECK (state IN (''queued'', ''running'', ''succeeded''',
                       'CHECK (state IN (''queued'', ''running'', ''waiting'', ''succeeded''')
WHERE type = 'table' AND name = 'tenure_jobs';
UPDATE sqlite_master
SET sql = replace(sql, 'CHECK (kind IN (''step'', ''effect''))',
                       'CHECK (kind IN (''step'', ''effect'', ''wait''))')
WHERE type = 'table' AND name = 'tenure_stages';
PRAGMA writable_schema = OFF;
