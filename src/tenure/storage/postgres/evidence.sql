-- The PostgreSQL store's named queries for evidence and the retrieval cache (conventions: jobs.sql).

-- Evidence (see storage.sql_evidence): references written with the lease, the retrieval
-- cache per tenant, the class versions apps declare.

-- name: record_evidence
-- guard: lease (model: record)
-- One row per reference and job: a later attempt recording it again takes it over (its token).
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
owned AS (
    SELECT j.id, clock.now AS at FROM tenure_jobs j, clock
    WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
      AND j.fencing_token = %(token)s AND j.lease_until > clock.now
    FOR KEY SHARE OF j
)
INSERT INTO tenure_evidence (job_id, ref_sha256, type, ref, retriever, token, attempt, at)
SELECT id, %(ref_sha256)s, %(type)s, %(ref)s::jsonb, %(retriever)s, %(token)s, %(attempt)s, at
FROM owned
ON CONFLICT (job_id, ref_sha256) DO UPDATE
SET token = EXCLUDED.token, attempt = EXCLUDED.attempt, at = EXCLUDED.at
RETURNING job_id;

-- name: evidence
SELECT seq, type, ref, retriever, token, attempt, at FROM tenure_evidence
WHERE job_id = %(job_id)s::uuid
ORDER BY seq;

-- name: cached_retrieval
SELECT refs FROM tenure_retrievals
WHERE tenant = %(tenant)s AND key = %(key)s AND expires_at > clock_timestamp();

-- name: cache_retrieval
INSERT INTO tenure_retrievals (tenant, key, retriever, refs, created_at, expires_at)
SELECT %(tenant)s, %(key)s, %(retriever)s, %(refs)s::jsonb, clock_timestamp(),
       clock_timestamp() + make_interval(secs => %(ttl)s)
ON CONFLICT (tenant, key) DO UPDATE
SET retriever = EXCLUDED.retriever, refs = EXCLUDED.refs, created_at = EXCLUDED.created_at,
    expires_at = EXCLUDED.expires_at;

-- name: purge_retrievals
DELETE FROM tenure_retrievals
WHERE expires_at <= clock_timestamp()
   OR created_at < clock_timestamp() - make_interval(secs => %(older_than)s)
RETURNING key;

-- name: declare_versions
-- `versions` is a JSON object of kind -> the version of its job class.
INSERT INTO tenure_kinds (kind, labels, version, updated_at)
SELECT g.key, 'null'::jsonb, g.value::integer, clock_timestamp()
FROM jsonb_each_text(%(versions)s::jsonb) AS g
ON CONFLICT (kind) DO UPDATE SET version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
WHERE tenure_kinds.version IS DISTINCT FROM EXCLUDED.version;

-- name: retrieval_totals
-- Per retriever: lookups answered from the cache, by a search, and refs a recheck dropped.
SELECT e.detail ->> 'retriever' AS retriever,
       count(*) FILTER (WHERE e.detail ->> 'cache' = 'hit') AS hits,
       count(*) FILTER (WHERE e.detail ->> 'cache' = 'miss') AS misses,
       COALESCE(sum((e.detail ->> 'dropped')::bigint), 0) AS dropped
FROM tenure_events e
WHERE e.type = 'evidence_retrieved'
GROUP BY 1
ORDER BY 1;
