-- The fence receiver's tables (FenceGuard), version 2 (SQLite).
CREATE TABLE tenure_fence_scopes (
    scope      TEXT    PRIMARY KEY,
    highest    INTEGER NOT NULL,
    updated_at REAL    NOT NULL
);

CREATE TABLE tenure_fence_results (
    key         TEXT    PRIMARY KEY,
    scope       TEXT    NOT NULL,
    fence       INTEGER NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('running', 'done')),
    result      TEXT,
    started_at  REAL    NOT NULL,
    finished_at REAL
);
CREATE INDEX tenure_fence_results_scope ON tenure_fence_results (scope);
