-- tenure schema, version 5: concurrency limits enforced at claim time (fair scheduling).
-- scope 'tenant': at most max_running jobs of that tenant run at once, across all workers.
-- (Per-kind limits come from the job classes, passed with each claim.)
CREATE TABLE tenure_limits (
    scope       TEXT    NOT NULL CHECK (scope IN ('tenant')),
    name        TEXT    NOT NULL,
    max_running INTEGER NOT NULL CHECK (max_running >= 1),
    PRIMARY KEY (scope, name)
);
