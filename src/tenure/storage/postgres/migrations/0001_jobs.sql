-- tenure schema, version 1 (PostgreSQL). Numbered in lockstep with sqlite/migrations.
CREATE TABLE tenure_jobs (
    id              uuid PRIMARY KEY,
    seq             bigint GENERATED ALWAYS AS IDENTITY UNIQUE,  -- submission order
    kind            text        NOT NULL,
    tenant          text        NOT NULL DEFAULT 'default',
    state           text        NOT NULL DEFAULT 'queued'
                    CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    owner_id        text,
    lease_until     timestamptz,
    fencing_token   bigint      NOT NULL DEFAULT 0,
    heartbeat_at    timestamptz,
    attempt         integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL CHECK (max_attempts >= 1),
    idempotency_key text,
    payload         jsonb       NOT NULL,
    payload_sha256  text        NOT NULL,
    step            integer     NOT NULL DEFAULT 0,
    checkpoint      jsonb,
    result          jsonb,
    error           jsonb,
    run_after       timestamptz NOT NULL,
    priority        integer     NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    CONSTRAINT tenure_jobs_tenant_key UNIQUE (tenant, idempotency_key)
);

-- Claimable rows only: history does not slow the claim path.
CREATE INDEX tenure_jobs_queued ON tenure_jobs (priority DESC, seq)
    WHERE state = 'queued';
CREATE INDEX tenure_jobs_running_lease ON tenure_jobs (lease_until)
    WHERE state = 'running';
CREATE INDEX tenure_jobs_listing ON tenure_jobs (tenant, seq DESC);

CREATE TABLE tenure_stages (
    job_id      uuid    NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    position    integer NOT NULL,
    name        text    NOT NULL,
    kind        text    NOT NULL CHECK (kind IN ('step', 'effect')),
    status      text    NOT NULL CHECK (status IN ('started', 'done', 'failed')),
    token       bigint  NOT NULL,
    result      jsonb,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    PRIMARY KEY (job_id, position)
);

CREATE TABLE tenure_effects (
    job_id          uuid   NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    name            text   NOT NULL,
    idempotency_key text   NOT NULL,
    status          text   NOT NULL CHECK (status IN ('started', 'done', 'failed')),
    token           bigint NOT NULL,
    result          jsonb,
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    PRIMARY KEY (job_id, name)
);

CREATE TABLE tenure_events (
    seq      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id   uuid        NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    type     text        NOT NULL,
    at       timestamptz NOT NULL,
    token    bigint,
    owner_id text,
    detail   jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX tenure_events_job ON tenure_events (job_id, seq);
