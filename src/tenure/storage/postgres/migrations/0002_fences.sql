-- The fence receiver's tables (FenceGuard), version 2 (PostgreSQL).
CREATE TABLE tenure_fence_scopes (
    scope      text        PRIMARY KEY,
    highest    bigint      NOT NULL,
    updated_at timestamptz NOT NULL
);

CREATE TABLE tenure_fence_results (
    key         text        PRIMARY KEY,
    scope       text        NOT NULL,
    fence       bigint      NOT NULL,
    status      text        NOT NULL CHECK (status IN ('running', 'done')),
    result      jsonb,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz
);
CREATE INDEX tenure_fence_results_scope ON tenure_fence_results (scope);
