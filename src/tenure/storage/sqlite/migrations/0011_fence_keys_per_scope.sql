-- tenure schema, version 11 (SQLite): a receiver's idempotency keys are per scope. Before,
-- scope B sending scope A's key got A's stored result. SQLite changes a primary key by
-- rebuilding the table.
CREATE TABLE tenure_fence_results_v11 (
    key         TEXT    NOT NULL,
    scope       TEXT    NOT NULL,
    fence       INTEGER NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('running', 'done')),
    result      TEXT,
    started_at  REAL    NOT NULL,
    finished_at REAL,
    PRIMARY KEY (scope, key)
);
INSERT INTO tenure_fence_results_v11 (key, scope, fence, status, result, started_at, finished_at)
SELECT key, scope, fence, status, result, started_at, finished_at FROM tenure_fence_results;
DROP TABLE tenure_fence_results;
ALTER TABLE tenure_fence_results_v11 RENAME TO tenure_fence_results;
CREATE INDEX tenure_fence_results_key ON tenure_fence_results (key);
