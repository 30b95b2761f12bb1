-- The SQLite store's named queries for stages: the write-ahead records of steps and effects, and the checkpoint (conventions: jobs.sql).

-- name: save_step
-- guard: lease (model: record)
UPDATE tenure_jobs
SET step = :step, checkpoint = :checkpoint, updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id;

-- name: stages
SELECT position, name, kind, status, token, result
FROM tenure_stages
WHERE job_id = :job_id
ORDER BY position;

-- name: stage_start
-- guard: lease (model: record)
UPDATE tenure_jobs
SET updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id;

-- name: stage_start__stage
INSERT INTO tenure_stages (job_id, position, name, kind, status, token, started_at,
                           timeout_seconds)
VALUES (:job_id, :position, :name, :kind, 'started', :token, :now, :timeout_seconds)
ON CONFLICT (job_id, position) DO UPDATE
SET status = 'started', token = excluded.token, started_at = excluded.started_at,
    result = NULL, finished_at = NULL, timeout_seconds = excluded.timeout_seconds;

-- name: stage_start__effect
INSERT INTO tenure_effects (job_id, name, idempotency_key, status, token, started_at)
VALUES (:job_id, :name, :effect_key, 'started', :token, :now)
ON CONFLICT (job_id, name) DO UPDATE
SET status = 'started', token = excluded.token, started_at = excluded.started_at,
    result = NULL, finished_at = NULL;

-- name: stage_raised
-- guard: lease (model: record)
UPDATE tenure_jobs
SET updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id;

-- name: stage_raised__stage
DELETE FROM tenure_stages
WHERE job_id = :job_id AND position = :position AND status = 'started' AND kind = 'step';

-- name: stage_done
-- guard: lease (model: record)
UPDATE tenure_jobs
SET step = :position + 1, updated_at = :now, checkpoint = COALESCE(:checkpoint, checkpoint)
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id;

-- name: stage_done__stage
UPDATE tenure_stages
SET status = 'done', result = :result, finished_at = :now
WHERE job_id = :job_id AND position = :position
RETURNING name, kind;

-- name: stage_done__effect
UPDATE tenure_effects
SET status = 'done', result = :result, finished_at = :now
WHERE job_id = :job_id AND name = :name;

-- name: overdue_stages
-- Steps and effects still `started` past their stage timeout, of running jobs: the seed's TTL
-- on RUNNING steps, counted from the database so that a hung worker cannot hide them.
WITH clock AS (SELECT (julianday('now') - 2440587.5) * 86400.0 AS now)
SELECT j.kind,
       CASE WHEN :by_tenant THEN j.tenant END AS tenant,
       j.labels,
       count(*) AS stages,
       max(clock.now - s.started_at - s.timeout_seconds) AS most_overdue
FROM tenure_stages s CROSS JOIN clock
JOIN tenure_jobs j ON j.id = s.job_id
WHERE s.status = 'started' AND s.timeout_seconds IS NOT NULL
  AND s.started_at + s.timeout_seconds < clock.now AND j.state = 'running'
GROUP BY j.kind, 2, j.labels
ORDER BY j.kind, 2, j.labels;
