-- The SQLite store's named queries for runs that wait: signals, the guarded wait, children (conventions: jobs.sql).

-- Runs that wait (see storage.waits): steps of one BEGIN IMMEDIATE transaction each.

-- name: signal
-- A wait for several signals keeps the names still to come in `pending`: the job waits for
-- this one when it is the only one left (`signal__answered` drops it).
SELECT kind, state, fencing_token,
       state = 'waiting' AND json_extract(wait, '$.for') = 'signal'
           AND (json_type(wait, '$.pending') IS NULL AND json_extract(wait, '$.name') = :name
                OR json_array_length(wait, '$.pending') = 1
                   AND json_extract(wait, '$.pending[0]') = :name) AS waits_for_it,
       state = 'waiting' AND EXISTS (
           SELECT 1 FROM json_each(wait, '$.pending') WHERE value = :name) AS pends_on_it
FROM tenure_jobs WHERE id = :job_id;

-- name: signal__existing
SELECT payload_sha256 AS existing FROM tenure_signals WHERE job_id = :job_id AND name = :name;

-- name: signal__insert
INSERT INTO tenure_signals (job_id, name, payload, payload_sha256, at)
VALUES (:job_id, :name, :payload, :payload_sha256, :now);

-- name: signal__answered
UPDATE tenure_jobs
SET wait = json_set(wait, '$.pending', json((
    SELECT json_group_array(value) FROM json_each(wait, '$.pending') WHERE value <> :name)))
WHERE id = :job_id AND state = 'waiting';

-- name: signal__wake
UPDATE tenure_jobs SET run_after = :now WHERE id = :job_id AND state = 'waiting';

-- name: wait__lock
-- guard: lease (model: wait)
SELECT wait, :now AS now FROM tenure_jobs
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now;

-- name: wait__signal
SELECT payload FROM tenure_signals WHERE job_id = :job_id AND name = :name;

-- name: wait__children
SELECT id, state, result, error FROM tenure_jobs
WHERE parent_id = :job_id AND id IN (SELECT value FROM json_each(:ids));

-- name: wait__settle
-- guard: lease (model: wait)
UPDATE tenure_jobs
SET step = :position + 1, updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id;

-- name: wait__settle_stage
INSERT INTO tenure_stages (job_id, position, name, kind, status, token, result, started_at,
                           finished_at)
VALUES (:job_id, :position, :name, 'wait', 'done', :token, :result, :now, :now)
ON CONFLICT (job_id, position) DO UPDATE
SET status = 'done', token = excluded.token, result = excluded.result,
    finished_at = excluded.finished_at;

-- name: wait__settle_event
INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
VALUES (:job_id, 'step_done', :now, :token, :owner_id, :detail);

-- name: wait__suspend
-- guard: lease (model: wait)
UPDATE tenure_jobs
SET state = 'waiting', owner_id = NULL, lease_until = NULL, attempt = attempt - 1,
    wait = :wait, updated_at = :now, run_after = COALESCE(:until, 253370764800.0)
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id;

-- name: wait__suspend_stage
INSERT INTO tenure_stages (job_id, position, name, kind, status, token, started_at)
VALUES (:job_id, :position, :name, 'wait', 'started', :token, :now)
ON CONFLICT (job_id, position) DO UPDATE SET token = excluded.token;

-- name: wait__suspend_event
INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
VALUES (:job_id, 'job_waiting', :now, :token, :owner_id, :detail);

-- name: children
SELECT id, kind, tenant, state, owner_id, lease_until, fencing_token, heartbeat_at, attempt,
       max_attempts, idempotency_key, payload, payload_sha256, step, checkpoint, result, error,
       run_after, priority, created_at, updated_at, parent_id, wait, variant, labels,
       traceparent, principal, version
FROM tenure_jobs
WHERE parent_id = :job_id
ORDER BY rowid;
