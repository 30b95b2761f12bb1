-- The PostgreSQL store's named queries for stages: the write-ahead records of steps and effects, and the checkpoint (conventions: jobs.sql).

-- name: save_step
-- guard: lease (model: record)
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
saved AS (
    UPDATE tenure_jobs j
    SET step = %(step)s, checkpoint = %(checkpoint)s::jsonb, updated_at = clock.now
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
      AND j.fencing_token = %(token)s AND j.lease_until > clock.now
    RETURNING j.id, clock.now AS at
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, 'step_saved', at, %(token)s, %(owner_id)s, %(detail)s::jsonb FROM saved
)
SELECT id::text AS id FROM saved;

-- name: stages
SELECT position, name, kind, status, token, result
FROM tenure_stages
WHERE job_id = %(job_id)s::uuid
ORDER BY position;

-- name: stage_start
-- guard: lease (model: record)
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
owned AS (
    UPDATE tenure_jobs j
    SET updated_at = clock.now
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
      AND j.fencing_token = %(token)s AND j.lease_until > clock.now
    RETURNING j.id, clock.now AS at
),
stage AS (
    INSERT INTO tenure_stages (job_id, position, name, kind, status, token, started_at,
                               timeout_seconds)
    SELECT id, %(position)s, %(name)s, %(kind)s, 'started', %(token)s, at,
           %(timeout_seconds)s::float8
    FROM owned
    ON CONFLICT (job_id, position) DO UPDATE
    SET status = 'started', token = EXCLUDED.token, started_at = EXCLUDED.started_at,
        result = NULL, finished_at = NULL, timeout_seconds = EXCLUDED.timeout_seconds
    RETURNING job_id
),
effect AS (
    INSERT INTO tenure_effects (job_id, name, idempotency_key, status, token, started_at)
    SELECT id, %(name)s, %(effect_key)s, 'started', %(token)s, at FROM owned
    WHERE %(kind)s = 'effect'
    ON CONFLICT (job_id, name) DO UPDATE
    SET status = 'started', token = EXCLUDED.token, started_at = EXCLUDED.started_at,
        result = NULL, finished_at = NULL
    RETURNING job_id
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, %(event)s, at, %(token)s, %(owner_id)s, %(detail)s::jsonb FROM owned
)
SELECT id::text AS id FROM owned;

-- name: stage_raised
-- guard: lease (model: record)
-- A step whose function raised: its `started` record goes (the next attempt runs it afresh,
-- not in doubt: nothing was left half done by a dead worker) and `step_failed` says why.
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
owned AS (
    UPDATE tenure_jobs j
    SET updated_at = clock.now
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
      AND j.fencing_token = %(token)s AND j.lease_until > clock.now
    RETURNING j.id, clock.now AS at
),
forgotten AS (
    DELETE FROM tenure_stages s USING owned
    WHERE s.job_id = owned.id AND s.position = %(position)s AND s.status = 'started'
      AND s.kind = 'step'
    RETURNING s.job_id
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, 'step_failed', at, %(token)s, %(owner_id)s, %(detail)s::jsonb FROM owned
)
SELECT id::text AS id FROM owned;

-- name: stage_done
-- guard: lease (model: record)
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
owned AS (
    UPDATE tenure_jobs j
    SET step = %(position)s + 1, updated_at = clock.now,
        checkpoint = COALESCE(%(checkpoint)s::jsonb, j.checkpoint)
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
      AND j.fencing_token = %(token)s AND j.lease_until > clock.now
    RETURNING j.id, clock.now AS at
),
stage AS (
    UPDATE tenure_stages s
    SET status = 'done', result = %(result)s::jsonb, finished_at = o.at
    FROM owned o
    WHERE s.job_id = o.id AND s.position = %(position)s
    RETURNING s.job_id, s.name, s.kind
),
effect AS (
    UPDATE tenure_effects e
    SET status = 'done', result = %(result)s::jsonb, finished_at = o.at
    FROM owned o, stage st
    WHERE e.job_id = o.id AND st.kind = 'effect' AND e.name = st.name
    RETURNING e.job_id
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, 'step_done', at, %(token)s, %(owner_id)s, %(detail)s::jsonb FROM owned
)
SELECT id::text AS id FROM owned;

-- name: overdue_stages
-- Steps and effects still `started` past their stage timeout, of running jobs: the seed's TTL
-- on RUNNING steps, counted from the database so that a hung worker cannot hide them.
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT j.kind,
       CASE WHEN %(by_tenant)s THEN j.tenant END AS tenant,
       j.labels,
       count(*) AS stages,
       max(EXTRACT(EPOCH FROM clock.now - s.started_at) - s.timeout_seconds) AS most_overdue
FROM tenure_stages s CROSS JOIN clock
JOIN tenure_jobs j ON j.id = s.job_id
WHERE s.status = 'started' AND s.timeout_seconds IS NOT NULL
  AND s.started_at + make_interval(secs => s.timeout_seconds) < clock.now
  AND j.state = 'running'
GROUP BY j.kind, 2, j.labels
ORDER BY j.kind, 2, j.labels;
