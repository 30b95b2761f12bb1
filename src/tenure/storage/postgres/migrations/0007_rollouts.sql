-- tenure schema, version 7 (PostgreSQL): rollouts. A job of a kind with a rollout gets a
-- variant at submit (NULL: the stable one); the rollout row is the one place its breaker trips.
ALTER TABLE tenure_jobs ADD COLUMN variant text;

CREATE TABLE tenure_rollouts (
    kind             text PRIMARY KEY,
    variant          text NOT NULL,
    tenants          jsonb,
    percent          double precision NOT NULL,
    max_failure_rate double precision,
    max_cost_ratio   double precision,
    min_jobs         integer NOT NULL,
    on_trip          text NOT NULL CHECK (on_trip IN ('stable', 'hold')),
    state            text NOT NULL CHECK (state IN ('active', 'tripped')),
    started_at       timestamptz NOT NULL,
    tripped_at       timestamptz,
    trip             jsonb
);

-- What a handler reported it spent, per attempt (`ctx.report_cost`).
CREATE TABLE tenure_costs (
    job_id  uuid NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    attempt integer NOT NULL,
    tokens  bigint NOT NULL,
    usd     double precision NOT NULL,
    at      timestamptz NOT NULL
);
CREATE INDEX tenure_costs_job ON tenure_costs (job_id);
