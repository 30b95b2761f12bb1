-- Tenants and their API keys (tenure serve), version 3 (SQLite). See the PostgreSQL file.
CREATE TABLE tenure_tenants (
    name       TEXT PRIMARY KEY,
    created_at REAL NOT NULL
);

CREATE TABLE tenure_api_keys (
    key_id     TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL REFERENCES tenure_tenants (name) ON DELETE CASCADE,
    key_sha256 TEXT NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX tenure_api_keys_tenant ON tenure_api_keys (tenant);

-- Recovery events are rare: a partial index lets /metrics count them without reading the rest.
CREATE INDEX tenure_events_recovery ON tenure_events (type, job_id)
    WHERE type IN ('lease_expired', 'heartbeat_lost', 'result_rejected', 'step_in_doubt',
                   'ownership_unknown');
