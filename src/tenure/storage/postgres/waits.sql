-- The PostgreSQL store's named queries for runs that wait: signals, the guarded wait, children (conventions: jobs.sql).

-- Runs that wait (see storage.waits). A signal, a wait and a child's end meet on the job's row
-- lock, so a wake-up is never lost between a check and a suspend.

-- name: signal
-- Stored once per job and name (the first wins). The job's row is updated whatever it is doing
-- (locking it), and woken if it waits for this name. A wait for several signals keeps the
-- names still to come in `pending`: this statement drops its own and wakes the job when it was
-- the last. Two signals of one job meet on the row lock, and the second's SET reads the row the
-- first committed (not its snapshot's), so the last of them always wakes it.
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
target AS (
    UPDATE tenure_jobs j
    SET run_after = CASE WHEN j.state = 'waiting' AND j.wait ->> 'for' = 'signal'
                              AND ((j.wait -> 'pending') = jsonb_build_array(%(name)s::text)
                                   OR NOT (j.wait ? 'pending') AND j.wait ->> 'name' = %(name)s)
                         THEN clock.now ELSE j.run_after END,
        wait = CASE WHEN j.state = 'waiting' AND (j.wait -> 'pending') ? %(name)s
                    THEN jsonb_set(j.wait, '{pending}', (j.wait -> 'pending') - %(name)s::text)
                    ELSE j.wait END
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state IN ('queued', 'running', 'waiting')
    RETURNING j.id, j.kind, j.fencing_token, clock.now AS at,
              j.state = 'waiting' AND j.run_after = clock.now AS woke
),
inserted AS (
    INSERT INTO tenure_signals (job_id, name, payload, payload_sha256, at)
    SELECT id, %(name)s, %(payload)s::jsonb, %(payload_sha256)s, at FROM target
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING job_id
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT t.id, 'signal_received', t.at, t.fencing_token, NULL,
           %(detail)s::jsonb || jsonb_build_object('woke', t.woke)
    FROM target t JOIN inserted i ON i.job_id = t.id
)
SELECT (SELECT count(*) FROM inserted) AS inserted,
       (SELECT s.payload_sha256 FROM tenure_signals s
        WHERE s.job_id = %(job_id)s::uuid AND s.name = %(name)s) AS existing
FROM target
LEFT JOIN LATERAL (
    SELECT pg_notify('tenure_jobs:' || current_schema(), target.kind) WHERE target.woke
) AS woken ON true;

-- name: signal__existing
-- A signal inserted by a concurrent statement is not in the first one's snapshot.
SELECT payload_sha256 AS existing FROM tenure_signals
WHERE job_id = %(job_id)s::uuid AND name = %(name)s;

-- name: wait__lock
-- guard: lease (model: wait)
-- The job's row, locked; the next statements of the transaction see everything committed
-- before the lock was granted (a signal or a child's end included).
SELECT j.wait, clock_timestamp() AS now
FROM tenure_jobs j
WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
  AND j.fencing_token = %(token)s AND j.lease_until > clock_timestamp()
FOR UPDATE;

-- name: wait__signal
SELECT payload FROM tenure_signals WHERE job_id = %(job_id)s::uuid AND name = %(name)s;

-- name: wait__children
SELECT id::text AS id, state, result, error FROM tenure_jobs
WHERE parent_id = %(job_id)s::uuid AND id = ANY (%(ids)s::uuid[]);

-- name: wait__settle
-- guard: lease (model: wait)
-- The wait's outcome is recorded as a done stage and the cursor moves past it.
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
owned AS (
    UPDATE tenure_jobs j
    SET step = %(position)s + 1, updated_at = clock.now
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
      AND j.fencing_token = %(token)s AND j.lease_until > clock.now
    RETURNING j.id, clock.now AS at
),
stage AS (
    INSERT INTO tenure_stages (job_id, position, name, kind, status, token, result, started_at,
                               finished_at)
    SELECT id, %(position)s, %(name)s, 'wait', 'done', %(token)s, %(result)s::jsonb, at, at
    FROM owned
    ON CONFLICT (job_id, position) DO UPDATE
    SET status = 'done', token = EXCLUDED.token, result = EXCLUDED.result,
        finished_at = EXCLUDED.finished_at
    RETURNING job_id
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, 'step_done', at, %(token)s, %(owner_id)s, %(detail)s::jsonb FROM owned
)
SELECT id::text AS id FROM owned;

-- name: wait__suspend
-- guard: lease (model: wait)
-- Suspend: no lease, no owner, the attempt given back (resuming spends none); claimable again
-- at `until` (a timer or timeout), or when a signal or child sets run_after to now.
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
suspended AS (
    UPDATE tenure_jobs j
    SET state = 'waiting', owner_id = NULL, lease_until = NULL, attempt = j.attempt - 1,
        wait = %(wait)s::jsonb, updated_at = clock.now,
        run_after = COALESCE(%(until)s::timestamptz, '9999-01-01T00:00:00Z'::timestamptz)
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
      AND j.fencing_token = %(token)s AND j.lease_until > clock.now
    RETURNING j.id, clock.now AS at
),
stage AS (
    INSERT INTO tenure_stages (job_id, position, name, kind, status, token, started_at)
    SELECT id, %(position)s, %(name)s, 'wait', 'started', %(token)s, at FROM suspended
    ON CONFLICT (job_id, position) DO UPDATE SET token = EXCLUDED.token
    RETURNING job_id
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, 'job_waiting', at, %(token)s, %(owner_id)s, %(detail)s::jsonb FROM suspended
)
SELECT id::text AS id FROM suspended;

-- name: children
SELECT id::text AS id, kind, tenant, state, owner_id, lease_until, fencing_token, heartbeat_at,
       attempt, max_attempts, idempotency_key, payload, payload_sha256, step, checkpoint,
       result, error, run_after, priority, created_at, updated_at, parent_id::text AS parent_id,
       wait, variant, labels, traceparent, principal, version
FROM tenure_jobs
WHERE parent_id = %(job_id)s::uuid
ORDER BY seq;
