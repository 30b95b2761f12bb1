-- tenure schema, version 12 (PostgreSQL): evidence by reference. A job acts for a principal
-- and keeps the class version it was submitted under (declared by the app's classes in
-- tenure_kinds); its evidence references are written with the attempt's token; retrieval
-- results are cached per tenant, under a key that names the permission and index versions.
ALTER TABLE tenure_jobs ADD COLUMN principal text;
ALTER TABLE tenure_jobs ADD COLUMN version integer;
ALTER TABLE tenure_kinds ADD COLUMN version integer;

CREATE TABLE tenure_evidence (
    job_id     uuid    NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    seq        bigint  GENERATED ALWAYS AS IDENTITY,
    ref_sha256 text    NOT NULL,     -- the canonical reference's digest: one row per reference
    type       text    NOT NULL CHECK (type IN ('document', 'code', 'media')),
    ref        jsonb   NOT NULL,
    retriever  text,
    token      bigint  NOT NULL,
    attempt    integer NOT NULL,
    at         timestamptz NOT NULL,
    PRIMARY KEY (job_id, ref_sha256)
);

-- Every lookup names the tenant: a key shared by two tenants (a collision, or a key built
-- without the tenant) still finds only the caller's row.
CREATE TABLE tenure_retrievals (
    tenant     text        NOT NULL,
    key        text        NOT NULL,
    retriever  text        NOT NULL,
    refs       jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX tenure_retrievals_expiry ON tenure_retrievals (expires_at);
