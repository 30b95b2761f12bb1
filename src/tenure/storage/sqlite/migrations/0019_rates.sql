-- tenure schema, version 19 (SQLite): fleet-wide rate limits (see the PostgreSQL version).
CREATE TABLE tenure_rates (
    key         TEXT PRIMARY KEY,
    tat         REAL NOT NULL,
    last_tenant TEXT
);
