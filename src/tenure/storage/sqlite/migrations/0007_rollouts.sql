-- tenure schema, version 7 (SQLite): rollouts. A job of a kind with a rollout gets a variant
-- at submit (NULL: the stable one); the rollout row is the one place its breaker trips.
ALTER TABLE tenure_jobs ADD COLUMN variant TEXT;

CREATE TABLE tenure_rollouts (
    kind             TEXT PRIMARY KEY,
    variant          TEXT NOT NULL,
    tenants          TEXT,
    percent          REAL NOT NULL,
    max_failure_rate REAL,
    max_cost_ratio   REAL,
    min_jobs         INTEGER NOT NULL,
    on_trip          TEXT NOT NULL CHECK (on_trip IN ('stable', 'hold')),
    state            TEXT NOT NULL CHECK (state IN ('active', 'tripped')),
    started_at       REAL NOT NULL,
    tripped_at       REAL,
    trip             TEXT
);

-- What a handler reported it spent, per attempt (`ctx.report_cost`).
CREATE TABLE tenure_costs (
    job_id  TEXT NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    tokens  INTEGER NOT NULL,
    usd     REAL NOT NULL,
    at      REAL NOT NULL
);
CREATE INDEX tenure_costs_job ON tenure_costs (job_id);
