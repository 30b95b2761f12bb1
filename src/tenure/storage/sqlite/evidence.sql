-- The SQLite store's named queries for evidence and the retrieval cache (conventions: jobs.sql).

-- Evidence (see storage.sql_evidence): references written with the lease, the retrieval
-- cache per tenant, the class versions apps declare.

-- name: record_evidence
-- guard: lease (model: record)
-- One row per reference and job: a later attempt recording it again takes it over (its token).
INSERT INTO tenure_evidence (job_id, seq, ref_sha256, type, ref, retriever, token, attempt, at)
SELECT id, (SELECT COALESCE(max(seq), 0) + 1 FROM tenure_evidence WHERE job_id = :job_id),
       :ref_sha256, :type, :ref, :retriever, :token, :attempt, :now
FROM tenure_jobs
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
ON CONFLICT (job_id, ref_sha256) DO UPDATE
SET token = excluded.token, attempt = excluded.attempt, at = excluded.at
RETURNING job_id;

-- name: evidence
SELECT seq, type, ref, retriever, token, attempt, at FROM tenure_evidence
WHERE job_id = :job_id
ORDER BY seq;

-- name: cached_retrieval
SELECT refs FROM tenure_retrievals
WHERE tenant = :tenant AND key = :key
  AND expires_at > (julianday('now') - 2440587.5) * 86400.0;

-- name: cache_retrieval
INSERT INTO tenure_retrievals (tenant, key, retriever, refs, created_at, expires_at)
VALUES (:tenant, :key, :retriever, :refs, :now, :now + :ttl)
ON CONFLICT (tenant, key) DO UPDATE
SET retriever = excluded.retriever, refs = excluded.refs, created_at = excluded.created_at,
    expires_at = excluded.expires_at;

-- name: purge_retrievals
DELETE FROM tenure_retrievals
WHERE expires_at <= :now OR created_at < :now - :older_than
RETURNING key;

-- name: declare_versions
-- `versions` is a JSON object of kind -> the version of its job class.
INSERT INTO tenure_kinds (kind, labels, version, updated_at)
SELECT g.key, 'null', CAST(g.value AS INTEGER), :now FROM json_each(:versions) AS g WHERE true
ON CONFLICT (kind) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at
WHERE tenure_kinds.version IS NOT excluded.version;

-- name: retrieval_totals
-- Per retriever: lookups answered from the cache, by a search, and refs a recheck dropped.
SELECT json_extract(e.detail, '$.retriever') AS retriever,
       count(*) FILTER (WHERE json_extract(e.detail, '$.cache') = 'hit') AS hits,
       count(*) FILTER (WHERE json_extract(e.detail, '$.cache') = 'miss') AS misses,
       COALESCE(sum(json_extract(e.detail, '$.dropped')), 0) AS dropped
FROM tenure_events e
WHERE e.type = 'evidence_retrieved'
GROUP BY 1
ORDER BY 1;
