-- The SQLite store's named queries for leases: claim and publish (one exchange), renew, fail, release, cancel, requeue, and the fair claim (conventions: jobs.sql).

-- name: exchange__exhausted
UPDATE tenure_jobs
SET state = 'failed', lease_until = NULL, updated_at = :now,
    error = json_object('code', 'lease_expired',
                        'message', 'the lease of the last allowed attempt expired')
WHERE state = 'running' AND lease_until <= :now AND attempt >= max_attempts
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
RETURNING id, fencing_token, owner_id, attempt, parent_id, heartbeat_at;

-- name: exchange__wake_parent
-- A child that ended wakes its parent if the parent waits for it (run in the transaction that
-- ended the child: SQLite's writers take turns, so a suspend cannot slip in between).
UPDATE tenure_jobs
SET run_after = :now
WHERE id = :parent_id AND state = 'waiting'
  AND EXISTS (SELECT 1 FROM json_each(wait, '$.jobs') AS awaited WHERE awaited.value = :child_id)
RETURNING kind;

-- name: exchange__candidates
-- Two scans, each on its own partial index and stopping at the limit (an OR of both would
-- read and sort every queued row on each claim).
SELECT id, state, owner_id, was_token, was_lease_until, was_heartbeat FROM (
    SELECT * FROM (
        SELECT id, state, owner_id, fencing_token AS was_token, lease_until AS was_lease_until,
               heartbeat_at AS was_heartbeat, priority, rowid AS position
        FROM tenure_jobs
        WHERE state = 'running' AND lease_until <= :now AND attempt < max_attempts
          AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
          AND (kind NOT IN (SELECT value FROM json_each(:pinned_kinds))
               OR kind || '@' || COALESCE(variant, 'stable')
                  IN (SELECT value FROM json_each(:pinned)))
          AND (:only_ids IS NULL OR id IN (SELECT value FROM json_each(:only_ids)))
        ORDER BY lease_until
        LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT id, state, owner_id, fencing_token AS was_token, lease_until AS was_lease_until,
               heartbeat_at AS was_heartbeat, priority, rowid AS position
        FROM tenure_jobs
        WHERE state = 'queued' AND run_after <= :now
          AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
          AND (kind NOT IN (SELECT value FROM json_each(:pinned_kinds))
               OR kind || '@' || COALESCE(variant, 'stable')
                  IN (SELECT value FROM json_each(:pinned)))
          AND (:only_ids IS NULL OR id IN (SELECT value FROM json_each(:only_ids)))
        ORDER BY priority DESC, rowid
        LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT id, state, owner_id, fencing_token AS was_token, lease_until AS was_lease_until,
               heartbeat_at AS was_heartbeat, priority, rowid AS position
        FROM tenure_jobs
        WHERE state = 'waiting' AND run_after <= :now
          AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
          AND (kind NOT IN (SELECT value FROM json_each(:pinned_kinds))
               OR kind || '@' || COALESCE(variant, 'stable')
                  IN (SELECT value FROM json_each(:pinned)))
          AND (:only_ids IS NULL OR id IN (SELECT value FROM json_each(:only_ids)))
        ORDER BY run_after
        LIMIT :limit
    )
)
ORDER BY priority DESC, position
LIMIT :limit;

-- name: exchange__take
UPDATE tenure_jobs
SET state = 'running', owner_id = :owner_id, lease_until = :now + :lease_seconds,
    heartbeat_at = :now, attempt = attempt + 1, updated_at = :now,
    -- Invariant 16: above every token handed out before, even one a file restored from a
    -- copy forgot: the floor is the clock in microseconds (as PostgreSQL's migration 0013).
    fencing_token = MAX(fencing_token + 1, CAST(:now * 1000000 AS INTEGER) + 1)
WHERE id = :id
RETURNING id, kind, tenant, fencing_token, attempt, max_attempts, payload, step, checkpoint,
          lease_until, wait, variant, labels, traceparent, principal, budgeted, :now AS claimed_at;

-- name: extend_many
-- guard: lease (model: extend)
UPDATE tenure_jobs
SET lease_until = :now + :lease_seconds, heartbeat_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id, lease_until;

-- name: exchange__complete
-- guard: lease (model: complete)
UPDATE tenure_jobs
SET state = 'succeeded', result = :result, lease_until = NULL, updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id, parent_id;

-- name: fail
-- guard: lease (model: fail)
UPDATE tenure_jobs
SET state = CASE WHEN :retry_delay IS NOT NULL AND attempt < max_attempts
                 THEN 'queued' ELSE 'failed' END,
    run_after = CASE WHEN :retry_delay IS NOT NULL AND attempt < max_attempts
                     THEN :now + :retry_delay ELSE run_after END,
    owner_id = CASE WHEN :retry_delay IS NOT NULL AND attempt < max_attempts
                    THEN NULL ELSE owner_id END,
    lease_until = NULL, error = :error, updated_at = :now,
    -- A receiver saw a higher token (or this one from another claim): the next claim is above.
    fencing_token = MAX(fencing_token, :token_floor)
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id, state, attempt, run_after, parent_id;

-- name: release
-- guard: lease (model: release)
UPDATE tenure_jobs
SET state = 'queued', owner_id = NULL, lease_until = NULL, attempt = attempt - 1,
    run_after = :now + :delay, updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id;

-- name: cancel__was
SELECT state FROM tenure_jobs WHERE id = :job_id;

-- name: cancel
UPDATE tenure_jobs
SET state = 'cancelled',
    fencing_token = MAX(fencing_token + 1, CAST(:now * 1000000 AS INTEGER) + 1),
    lease_until = NULL,
    updated_at = :now
WHERE id = :job_id AND state IN ('queued', 'running', 'waiting')
RETURNING id, fencing_token, owner_id, parent_id;

-- name: cancel__children
-- The unfinished children of a cancelled job: each is cancelled in turn (and so its own).
SELECT id FROM tenure_jobs
WHERE parent_id = :job_id AND state IN ('queued', 'running', 'waiting');

-- name: requeue__was
SELECT state FROM tenure_jobs WHERE id = :job_id;

-- name: requeue
UPDATE tenure_jobs
SET state = 'queued', attempt = 0, owner_id = NULL, lease_until = NULL, error = NULL,
    run_after = :now, updated_at = :now
WHERE id = :job_id AND state IN ('failed', 'cancelled')
RETURNING id, fencing_token, owner_id;

-- name: limited_claim__running
SELECT tenant, kind, count(*) AS running FROM tenure_jobs
WHERE state = 'running' AND lease_until > :now
GROUP BY tenant, kind;

-- name: limited_claim__window
SELECT id, tenant, kind, priority, payload FROM (
    SELECT * FROM (
        SELECT id, tenant, kind, priority, rowid AS position,
               CASE WHEN kind IN (SELECT value FROM json_each(:keyed_kinds)) THEN payload END
                 AS payload
        FROM tenure_jobs
        WHERE state = 'running' AND lease_until <= :now AND attempt < max_attempts
          AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
          AND (kind NOT IN (SELECT value FROM json_each(:pinned_kinds))
               OR kind || '@' || COALESCE(variant, 'stable')
                  IN (SELECT value FROM json_each(:pinned)))
          AND tenant NOT IN (SELECT value FROM json_each(:full_tenants))
          AND kind NOT IN (SELECT value FROM json_each(:full_kinds))
        ORDER BY lease_until LIMIT :window
    )
    UNION ALL
    SELECT * FROM (
        SELECT id, tenant, kind, priority, rowid AS position,
               CASE WHEN kind IN (SELECT value FROM json_each(:keyed_kinds)) THEN payload END
                 AS payload
        FROM tenure_jobs
        WHERE state = 'queued' AND run_after <= :now
          AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
          AND (kind NOT IN (SELECT value FROM json_each(:pinned_kinds))
               OR kind || '@' || COALESCE(variant, 'stable')
                  IN (SELECT value FROM json_each(:pinned)))
          AND tenant NOT IN (SELECT value FROM json_each(:full_tenants))
          AND kind NOT IN (SELECT value FROM json_each(:full_kinds))
        ORDER BY priority DESC, rowid LIMIT :window
    )
    UNION ALL
    SELECT * FROM (
        SELECT id, tenant, kind, priority, rowid AS position,
               CASE WHEN kind IN (SELECT value FROM json_each(:keyed_kinds)) THEN payload END
                 AS payload
        FROM tenure_jobs
        WHERE state = 'waiting' AND run_after <= :now
          AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
          AND (kind NOT IN (SELECT value FROM json_each(:pinned_kinds))
               OR kind || '@' || COALESCE(variant, 'stable')
                  IN (SELECT value FROM json_each(:pinned)))
          AND tenant NOT IN (SELECT value FROM json_each(:full_tenants))
          AND kind NOT IN (SELECT value FROM json_each(:full_kinds))
        ORDER BY run_after LIMIT :window
    )
)
ORDER BY priority DESC, position;

-- Rate limits (see the PostgreSQL file): epoch seconds, as every time of this dialect.

-- name: limited_claim__clock
SELECT :now AS now;

-- name: limited_claim__rates
SELECT key, tat, last_tenant FROM tenure_rates WHERE key IN (SELECT value FROM json_each(:keys));

-- name: limited_claim__rates_moved
INSERT INTO tenure_rates (key, tat, last_tenant)
SELECT key, json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:moved)
WHERE true
ON CONFLICT (key) DO UPDATE SET tat = max(tat, excluded.tat), last_tenant = excluded.last_tenant;

-- name: hold_rate_key
INSERT INTO tenure_rates (key, tat) VALUES (:key, :now + :seconds)
ON CONFLICT (key) DO UPDATE SET tat = max(tat, excluded.tat);
