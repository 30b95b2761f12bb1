-- tenure schema, version 12 (SQLite): evidence by reference. A job acts for a principal
-- and keeps the class version it was submitted under (declared by the app's classes in
-- tenure_kinds); its evidence references are written with the attempt's token; retrieval
-- results are cached per tenant, under a key that names the permission and index versions.
ALTER TABLE tenure_jobs ADD COLUMN principal TEXT;
ALTER TABLE tenure_jobs ADD COLUMN version INTEGER;
ALTER TABLE tenure_kinds ADD COLUMN version INTEGER;

CREATE TABLE tenure_evidence (
    job_id     TEXT    NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    ref_sha256 TEXT    NOT NULL,     -- the canonical reference's digest: one row per reference
    type       TEXT    NOT NULL CHECK (type IN ('document', 'code', 'media')),
    ref        TEXT    NOT NULL,
    retriever  TEXT,
    token      INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    at         REAL    NOT NULL,
    PRIMARY KEY (job_id, ref_sha256)
);

-- Every lookup names the tenant: a key shared by two tenants (a collision, or a key built
-- without the tenant) still finds only the caller's row.
CREATE TABLE tenure_retrievals (
    tenant     TEXT NOT NULL,
    key        TEXT NOT NULL,
    retriever  TEXT NOT NULL,
    refs       TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX tenure_retrievals_expiry ON tenure_retrievals (expires_at);
