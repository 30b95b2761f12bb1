

-- Named queries of the SQLite store (`-- name: NAME`): a block is named after the store method
-- that runs it; a method of several statements names its further steps `method__step`.
-- Writes run inside BEGIN IMMEDIATE; `:now` is read from SQLite's clock (query `now`) once the
-- write lock is held, so every comparison in the transaction uses one database time.
-- Lease-guarded writes are marked `-- guard: lease` and say state = 'running', owner_id,
-- fencing_token and lease_until > :now in their WHERE (tests/unit/test_queries.py checks both the
-- predicate and that PostgreSQL guards the same methods).

-- name: now
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now;

-- name: submit
-- A job held by a tripped rollout (`held`) waits for the signal `release`, due never until then.
INSERT INTO tenure_jobs (id, kind, tenant, max_attempts, idempotency_key, payload,
                         payload_sha256, run_after, priority, created_at, updated_at, parent_id,
                         variant, state, wait, labels, traceparent, principal, version,
                         budgeted)
VALUES (:id, :kind, :tenant, :max_attempts, :idempotency_key, :payload, :payload_sha256,
        CASE WHEN :held THEN 253402300799.0 ELSE COALESCE(:run_at, :now + :delay) END,
        :priority, :now, :now, :parent_id, :variant,
        CASE WHEN :held THEN 'waiting' ELSE 'queued' END,
        CASE WHEN :held THEN json('{"for": "signal", "name": "release", "position": -1, "held": true}') END,
        :labels, :traceparent, :principal,
        (SELECT version FROM tenure_kinds WHERE kind = :kind),
        -- Its run is budgeted: its own budget, or its parent's run (migration 0021).
        :budget IS NOT NULL
        OR EXISTS (SELECT 1 FROM tenure_jobs p WHERE p.id = :parent_id AND p.budgeted))
ON CONFLICT (tenant, idempotency_key) DO NOTHING
RETURNING id;

-- name: submit_many
-- `jobs` is a JSON array of [id, payload_sha256, payload text, event detail text, variant,
-- held]: one statement for the whole batch, read element by element (linear in the batch).
INSERT INTO tenure_jobs (id, kind, tenant, max_attempts, payload, payload_sha256, run_after,
                         priority, created_at, updated_at, variant, state, wait, labels,
                         traceparent, principal, version, budgeted)
SELECT json_extract(g.value, '$[0]'), :kind, :tenant, :max_attempts,
       json_extract(g.value, '$[2]'), json_extract(g.value, '$[1]'),
       CASE WHEN json_extract(g.value, '$[5]') THEN 253402300799.0
            ELSE COALESCE(:run_at, :now + :delay) END,
       :priority, :now, :now, json_extract(g.value, '$[4]'),
       CASE WHEN json_extract(g.value, '$[5]') THEN 'waiting' ELSE 'queued' END,
       CASE WHEN json_extract(g.value, '$[5]') THEN json('{"for": "signal", "name": "release", "position": -1, "held": true}') END,
       :labels, :traceparent, :principal, (SELECT version FROM tenure_kinds WHERE kind = :kind), 0
FROM json_each(:jobs) AS g
ORDER BY g.key;

-- name: submit_many__events
INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
SELECT json_extract(g.value, '$[0]'), 'job_submitted', :now, 0, NULL,
       json_extract(g.value, '$[3]')
FROM json_each(:jobs) AS g
ORDER BY g.key;

-- name: find_by_key
SELECT id, kind, payload_sha256
FROM tenure_jobs
WHERE tenant = :tenant AND idempotency_key = :idempotency_key;

-- name: record_event__unchecked
INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
VALUES (:job_id, :type, :now, :token, :owner_id, :detail);

-- name: record_event
INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
SELECT id, :type, :now, :token, :owner_id,
       json_patch(:detail, json_object('current_token', fencing_token, 'state', state))
FROM tenure_jobs
WHERE id = :job_id
RETURNING seq;

-- name: ended_among
SELECT id FROM tenure_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('succeeded', 'failed', 'cancelled');

-- name: get
SELECT id, kind, tenant, state, owner_id, lease_until, fencing_token, heartbeat_at, attempt,
       max_attempts, idempotency_key, payload, payload_sha256, step, checkpoint, result, error,
       run_after, priority, created_at, updated_at, parent_id, wait, variant, labels,
       traceparent, principal, version,
       (SELECT json_group_array(json_object('seq', v.seq, 'type', v.type, 'ref', json(v.ref),
                                            'retriever', v.retriever, 'token', v.token,
                                            'attempt', v.attempt, 'at', v.at))
        FROM (SELECT * FROM tenure_evidence WHERE job_id = tenure_jobs.id ORDER BY seq) AS v)
           AS evidence
FROM tenure_jobs
WHERE id = :job_id;

-- name: list_jobs
SELECT id, kind, tenant, state, owner_id, lease_until, fencing_token, heartbeat_at, attempt,
       max_attempts, idempotency_key, payload, payload_sha256, step, checkpoint, result, error,
       run_after, priority, created_at, updated_at, parent_id, wait, variant, labels,
       traceparent, principal, version
FROM tenure_jobs
WHERE (:state IS NULL OR state = :state)
  AND (:kind IS NULL OR kind = :kind)
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:principal IS NULL OR principal = :principal
       OR substr(principal, 1, length(:prefix)) = :prefix)
  AND (:after IS NULL
       OR rowid < (SELECT rowid FROM tenure_jobs WHERE id = :after))
ORDER BY rowid DESC
LIMIT :limit;

-- name: events
-- Each event with the job's class version and idempotency key; an effect's events (found by
-- the stage position in their detail) with the effect's key instead.
SELECT e.seq, e.job_id, e.type, e.at, e.token, e.owner_id, e.detail, e.timeline,
       j.version, COALESCE(f.idempotency_key, j.idempotency_key) AS idempotency_key
FROM tenure_events e
LEFT JOIN tenure_jobs j ON j.id = e.job_id
LEFT JOIN tenure_stages s
       ON s.job_id = e.job_id AND s.kind = 'effect'
      AND e.type IN ('tool_request_started', 'tool_outcome_unknown', 'step_done',
                     'step_in_doubt', 'step_failed')
      AND s.position = json_extract(e.detail, '$.position')
LEFT JOIN tenure_effects f ON f.job_id = s.job_id AND f.name = s.name
WHERE e.job_id = :job_id
ORDER BY e.seq;

-- name: count_by_state
SELECT state, count(*) AS n
FROM tenure_jobs
WHERE (:kind IS NULL OR kind = :kind)
  AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY state;

-- name: queue_figures
WITH clock AS (SELECT (julianday('now') - 2440587.5) * 86400.0 AS now)
SELECT j.kind,
       CASE WHEN :by_tenant THEN j.tenant END AS tenant,
       j.labels,
       j.state,
       count(*) AS jobs,
       count(*) FILTER (WHERE j.state = 'running' AND j.lease_until <= clock.now) AS expired,
       clock.now - min(j.heartbeat_at) FILTER (WHERE j.state = 'running') AS heartbeat_age,
       min(j.lease_until) FILTER (WHERE j.state = 'running') - clock.now AS lease_remaining,
       clock.now - min(j.run_after) FILTER (WHERE j.state = 'queued' AND j.run_after <= clock.now)
           AS due_age
FROM tenure_jobs j CROSS JOIN clock
GROUP BY j.kind, 2, j.labels, j.state
ORDER BY j.kind, 2, j.labels, j.state;

-- name: event_totals
SELECT j.kind,
       CASE WHEN :by_tenant THEN j.tenant END AS tenant,
       j.labels,
       count(*) FILTER (WHERE e.type = 'lease_expired') AS leases_expired,
       count(*) FILTER (WHERE e.type = 'lease_expired'
                          AND json_extract(e.detail, '$.then') = 'reclaimed') AS jobs_reclaimed,
       count(*) FILTER (WHERE e.type = 'heartbeat_lost') AS extension_failures,
       count(*) FILTER (WHERE e.type = 'result_rejected') AS results_rejected,
       count(*) FILTER (WHERE e.type = 'step_in_doubt') AS steps_in_doubt,
       count(*) FILTER (WHERE e.type = 'ownership_unknown') AS ownership_unknown
FROM tenure_events e JOIN tenure_jobs j ON j.id = e.job_id
WHERE e.type IN ('lease_expired', 'heartbeat_lost', 'result_rejected', 'step_in_doubt',
                 'ownership_unknown')
GROUP BY j.kind, 2, j.labels
ORDER BY j.kind, 2, j.labels;
