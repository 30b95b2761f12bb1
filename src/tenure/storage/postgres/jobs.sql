

-- Named queries of the PostgreSQL store (`-- name: NAME`): a block is named after the store
-- method that runs it; a method of several statements names its further steps `method__step`.
-- Every statement reads the clock once, from `clock` (clock_timestamp(), not now(): now() is the
-- start of the transaction). Where a lease end is compared on an index, the comparison reads
-- `(SELECT now FROM clock)`: a value known before the scan bounds the index range (a join
-- with `clock` would filter every running row instead). Batched lease writes find their rows
-- by primary key (`id = ANY (ids)`) and say `state || '' = 'running'`, which the partial
-- index on running rows cannot answer: stale statistics (few running rows when last
-- analyzed) must not make the planner read every running row for each batch.
-- Lease-guarded writes are marked `-- guard: lease` and say state = 'running', owner_id,
-- fencing_token and lease_until > clock.now in their WHERE; the ledger turns zero rows into
-- LeaseLost (tests/unit/test_queries.py checks the predicate and the parity with SQLite).

-- name: now
SELECT clock_timestamp() AS now;

-- name: submit
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
inserted AS (
    -- A job held by a tripped rollout waits for the signal `release`, due never until then.
    INSERT INTO tenure_jobs (id, kind, tenant, max_attempts, idempotency_key, payload,
                             payload_sha256, run_after, priority, created_at, updated_at,
                             parent_id, variant, state, wait, labels, traceparent, principal,
                             version, budgeted)
    SELECT %(id)s::uuid, %(kind)s, %(tenant)s, %(max_attempts)s, %(idempotency_key)s,
           %(payload)s::jsonb, %(payload_sha256)s,
           CASE WHEN %(held)s THEN '9999-12-31T00:00:00Z'::timestamptz
                ELSE COALESCE(%(run_at)s::timestamptz,
                              clock.now + make_interval(secs => %(delay)s)) END,
           %(priority)s, clock.now, clock.now, %(parent_id)s::uuid, %(variant)s,
           CASE WHEN %(held)s THEN 'waiting' ELSE 'queued' END,
           CASE WHEN %(held)s THEN '{"for": "signal", "name": "release", "position": -1, "held": true}'::jsonb END,
           %(labels)s::jsonb, %(traceparent)s, %(principal)s,
           (SELECT version FROM tenure_kinds WHERE kind = %(kind)s),
           -- Its run is budgeted: its own budget, or its parent's run (migration 0021).
           %(budget)s::jsonb IS NOT NULL
           OR EXISTS (SELECT 1 FROM tenure_jobs p WHERE p.id = %(parent_id)s::uuid AND p.budgeted)
    FROM clock
    ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, created_at, kind, run_after <= created_at AS due
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, 'job_submitted', created_at, 0, NULL, %(detail)s::jsonb FROM inserted
),
-- A budgeted job's ceiling (tenure.budgets), in the same statement as the job.
ceiling AS (
    INSERT INTO tenure_budgets (job_id, budget)
    SELECT id, %(budget)s::jsonb FROM inserted WHERE %(budget)s::jsonb IS NOT NULL
)
-- The notification is sent at commit; listening workers wake instead of polling. Channels
-- are per database: the schema in the name keeps two tenure schemas apart.
SELECT id::text AS id FROM inserted
LEFT JOIN LATERAL (
    SELECT pg_notify('tenure_jobs:' || current_schema(), inserted.kind) WHERE inserted.due
) AS woken ON true;

-- name: submit_many
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
given AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(payloads)s::jsonb[], %(payload_sha256s)s::text[],
                         %(details)s::jsonb[], %(variants)s::text[], %(helds)s::boolean[])
        WITH ORDINALITY AS g (id, payload, payload_sha256, detail, variant, held, position)
),
inserted AS (
    INSERT INTO tenure_jobs (id, kind, tenant, max_attempts, payload, payload_sha256, run_after,
                             priority, created_at, updated_at, variant, state, wait, labels,
                             traceparent, principal, version, budgeted)
    SELECT given.id, %(kind)s, %(tenant)s, %(max_attempts)s, given.payload,
           given.payload_sha256,
           CASE WHEN given.held THEN '9999-12-31T00:00:00Z'::timestamptz
                ELSE COALESCE(%(run_at)s::timestamptz,
                              clock.now + make_interval(secs => %(delay)s)) END,
           %(priority)s, clock.now, clock.now, given.variant,
           CASE WHEN given.held THEN 'waiting' ELSE 'queued' END,
           CASE WHEN given.held THEN '{"for": "signal", "name": "release", "position": -1, "held": true}'::jsonb END,
           %(labels)s::jsonb, %(traceparent)s, %(principal)s,
           (SELECT version FROM tenure_kinds WHERE kind = %(kind)s), false
    FROM given, clock
    ORDER BY given.position
    RETURNING id, created_at, run_after <= created_at AS due
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT inserted.id, 'job_submitted', inserted.created_at, 0, NULL, given.detail
    FROM inserted JOIN given ON given.id = inserted.id
),
summary AS (SELECT count(*) AS inserted, bool_or(due) AS any_due FROM inserted)
SELECT inserted FROM summary
LEFT JOIN LATERAL (
    SELECT pg_notify('tenure_jobs:' || current_schema(), %(kind)s::text) WHERE summary.any_due
) AS woken ON true;

-- name: find_by_key
SELECT id::text AS id, kind, payload_sha256
FROM tenure_jobs
WHERE tenant = %(tenant)s AND idempotency_key = %(idempotency_key)s;

-- name: record_event
-- The job's row is share-locked: a purge deleting it (FOR UPDATE) either waits for this event
-- and deletes it too, or this statement waits for the purge and finds no job (no orphans,
-- now that events have no foreign key).
INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
SELECT j.id, %(type)s, clock_timestamp(), %(token)s, %(owner_id)s,
       %(detail)s::jsonb
       || jsonb_build_object('current_token', j.fencing_token, 'state', j.state)
FROM tenure_jobs j
WHERE j.id = %(job_id)s::uuid
FOR KEY SHARE OF j
RETURNING seq;

-- name: ended_among
SELECT id::text AS id FROM tenure_jobs
WHERE id = ANY (%(ids)s::uuid[]) AND state IN ('succeeded', 'failed', 'cancelled');

-- name: get
SELECT id::text AS id, kind, tenant, state, owner_id, lease_until, fencing_token, heartbeat_at,
       attempt, max_attempts, idempotency_key, payload, payload_sha256, step, checkpoint,
       result, error, run_after, priority, created_at, updated_at, parent_id::text AS parent_id,
       wait, variant, labels, traceparent, principal, version,
       (SELECT jsonb_agg(jsonb_build_object('seq', v.seq, 'type', v.type, 'ref', v.ref,
                                            'retriever', v.retriever, 'token', v.token,
                                            'attempt', v.attempt,
                                            'at', extract(epoch FROM v.at)) ORDER BY v.seq)
        FROM tenure_evidence v WHERE v.job_id = tenure_jobs.id) AS evidence
FROM tenure_jobs
WHERE id = %(job_id)s::uuid;

-- name: list_jobs
SELECT id::text AS id, kind, tenant, state, owner_id, lease_until, fencing_token, heartbeat_at,
       attempt, max_attempts, idempotency_key, payload, payload_sha256, step, checkpoint,
       result, error, run_after, priority, created_at, updated_at, parent_id::text AS parent_id,
       wait, variant, labels, traceparent, principal, version
FROM tenure_jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND (%(principal)s::text IS NULL OR principal = %(principal)s::text
       OR starts_with(principal, %(prefix)s::text))
  AND (%(after)s::uuid IS NULL
       OR seq < (SELECT seq FROM tenure_jobs WHERE id = %(after)s::uuid))
ORDER BY seq DESC
LIMIT %(limit)s;

-- name: events
-- Each event with the job's class version and idempotency key; an effect's events (found by
-- the stage position in their detail) with the effect's key instead.
SELECT e.seq, e.job_id::text AS job_id, e.type, e.at, e.token, e.owner_id, e.detail, e.timeline,
       j.version, COALESCE(f.idempotency_key, j.idempotency_key) AS idempotency_key
FROM tenure_events e
LEFT JOIN tenure_jobs j ON j.id = e.job_id
LEFT JOIN tenure_stages s
       ON s.job_id = e.job_id AND s.kind = 'effect'
      AND e.type IN ('tool_request_started', 'tool_outcome_unknown', 'step_done',
                     'step_in_doubt', 'step_failed')
      AND s.position::text = e.detail ->> 'position'
LEFT JOIN tenure_effects f ON f.job_id = s.job_id AND f.name = s.name
WHERE e.job_id = %(job_id)s::uuid
ORDER BY e.seq;

-- name: count_by_state
SELECT state, count(*) AS n
FROM tenure_jobs
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
GROUP BY state;

-- name: queue_figures
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT j.kind,
       CASE WHEN %(by_tenant)s THEN j.tenant END AS tenant,
       j.labels,
       j.state,
       count(*) AS jobs,
       count(*) FILTER (WHERE j.state = 'running' AND j.lease_until <= clock.now) AS expired,
       EXTRACT(EPOCH FROM clock.now - min(j.heartbeat_at) FILTER (WHERE j.state = 'running'))
           AS heartbeat_age,
       EXTRACT(EPOCH FROM min(j.lease_until) FILTER (WHERE j.state = 'running') - clock.now)
           AS lease_remaining,
       EXTRACT(EPOCH FROM clock.now - min(j.run_after)
                              FILTER (WHERE j.state = 'queued' AND j.run_after <= clock.now))
           AS due_age
FROM tenure_jobs j CROSS JOIN clock
GROUP BY j.kind, 2, j.labels, j.state, clock.now
ORDER BY j.kind, 2, j.labels, j.state;

-- name: event_totals
SELECT j.kind,
       CASE WHEN %(by_tenant)s THEN j.tenant END AS tenant,
       j.labels,
       count(*) FILTER (WHERE e.type = 'lease_expired') AS leases_expired,
       count(*) FILTER (WHERE e.type = 'lease_expired' AND e.detail ->> 'then' = 'reclaimed')
           AS jobs_reclaimed,
       count(*) FILTER (WHERE e.type = 'heartbeat_lost') AS extension_failures,
       count(*) FILTER (WHERE e.type = 'result_rejected') AS results_rejected,
       count(*) FILTER (WHERE e.type = 'step_in_doubt') AS steps_in_doubt,
       count(*) FILTER (WHERE e.type = 'ownership_unknown') AS ownership_unknown
FROM tenure_events e JOIN tenure_jobs j ON j.id = e.job_id
WHERE e.type IN ('lease_expired', 'heartbeat_lost', 'result_rejected', 'step_in_doubt',
                 'ownership_unknown')
GROUP BY j.kind, 2, j.labels
ORDER BY j.kind, 2, j.labels;
