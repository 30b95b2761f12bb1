-- tenure schema, version 1 (SQLite). Numbered in lockstep with postgres/migrations.
-- Times are REAL seconds since the Unix epoch, read from SQLite's own clock.
-- Submission order is the rowid (SQLite's clock has millisecond resolution; ties are common).
CREATE TABLE tenure_jobs (
    id              TEXT PRIMARY KEY,
    kind            TEXT    NOT NULL,
    tenant          TEXT    NOT NULL DEFAULT 'default',
    state           TEXT    NOT NULL DEFAULT 'queued'
                    CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    owner_id        TEXT,
    lease_until     REAL,
    fencing_token   INTEGER NOT NULL DEFAULT 0,
    heartbeat_at    REAL,
    attempt         INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL CHECK (max_attempts >= 1),
    idempotency_key TEXT,
    payload         TEXT    NOT NULL,
    payload_sha256  TEXT    NOT NULL,
    step            INTEGER NOT NULL DEFAULT 0,
    checkpoint      TEXT,
    result          TEXT,
    error           TEXT,
    run_after       REAL    NOT NULL,
    priority        INTEGER NOT NULL DEFAULT 0,
    created_at      REAL    NOT NULL,
    updated_at      REAL    NOT NULL,
    UNIQUE (tenant, idempotency_key)
);

CREATE INDEX tenure_jobs_queued ON tenure_jobs (priority DESC)
    WHERE state = 'queued';
CREATE INDEX tenure_jobs_running_lease ON tenure_jobs (lease_until)
    WHERE state = 'running';
CREATE INDEX tenure_jobs_listing ON tenure_jobs (tenant);

CREATE TABLE tenure_stages (
    job_id      TEXT    NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    position    INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('step', 'effect')),
    status      TEXT    NOT NULL CHECK (status IN ('started', 'done', 'failed')),
    token       INTEGER NOT NULL,
    result      TEXT,
    started_at  REAL    NOT NULL,
    finished_at REAL,
    PRIMARY KEY (job_id, position)
);

CREATE TABLE tenure_effects (
    job_id          TEXT    NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    name            TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('started', 'done', 'failed')),
    token           INTEGER NOT NULL,
    result          TEXT,
    started_at      REAL    NOT NULL,
    finished_at     REAL,
    PRIMARY KEY (job_id, name)
);

CREATE TABLE tenure_events (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id   TEXT    NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    type     TEXT    NOT NULL,
    at       REAL    NOT NULL,
    token    INTEGER,
    owner_id TEXT,
    detail   TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX tenure_events_job ON tenure_events (job_id, seq);
