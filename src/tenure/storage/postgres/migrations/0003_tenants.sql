-- Tenants and their API keys (tenure serve), version 3 (PostgreSQL).
-- A key is stored as the SHA-256 of its secret: keys are 256 random bits, so a fast hash
-- cannot be brute-forced, and the key id (the public prefix) finds the row without a scan.
CREATE TABLE tenure_tenants (
    name       text        PRIMARY KEY,
    created_at timestamptz NOT NULL
);

CREATE TABLE tenure_api_keys (
    key_id     text        PRIMARY KEY,
    tenant     text        NOT NULL REFERENCES tenure_tenants (name) ON DELETE CASCADE,
    key_sha256 text        NOT NULL,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX tenure_api_keys_tenant ON tenure_api_keys (tenant);

-- Recovery events are rare: a partial index lets /metrics count them without reading the rest.
CREATE INDEX tenure_events_recovery ON tenure_events (type, job_id)
    WHERE type IN ('lease_expired', 'heartbeat_lost', 'result_rejected', 'step_in_doubt',
                   'ownership_unknown');
