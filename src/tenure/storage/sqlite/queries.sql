-- Named queries of the SQLite store (`-- name: NAME`): a block is named after the store method
-- that runs it; a method of several statements names its further steps `method__step`.
-- Writes run inside BEGIN IMMEDIATE; `:now` is read from SQLite's clock (query `now`) once the
-- write lock is held, so every comparison in the transaction uses one database time.
-- Lease-guarded writes are marked `-- guard: lease` and say state = 'running', owner_id,
-- fencing_token and lease_until > :now in their WHERE (tests/test_queries.py checks both the
-- predicate and that PostgreSQL guards the same methods).

-- name: now
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now;

-- name: submit
-- A job held by a tripped rollout (`held`) waits for the signal `release`, due never until then.
INSERT INTO tenure_jobs (id, kind, tenant, max_attempts, idempotency_key, payload,
                         payload_sha256, run_after, priority, created_at, updated_at, parent_id,
                         variant, state, wait, labels, traceparent, principal, version)
VALUES (:id, :kind, :tenant, :max_attempts, :idempotency_key, :payload, :payload_sha256,
        CASE WHEN :held THEN 253402300799.0 ELSE COALESCE(:run_at, :now + :delay) END,
        :priority, :now, :now, :parent_id, :variant,
        CASE WHEN :held THEN 'waiting' ELSE 'queued' END,
        CASE WHEN :held THEN json('{"for": "signal", "name": "release", "position": -1, "held": true}') END,
        :labels, :traceparent, :principal,
        (SELECT version FROM tenure_kinds WHERE kind = :kind))
ON CONFLICT (tenant, idempotency_key) DO NOTHING
RETURNING id;

-- name: submit_many
-- `jobs` is a JSON array of [id, payload_sha256, payload text, event detail text, variant,
-- held]: one statement for the whole batch, read element by element (linear in the batch).
INSERT INTO tenure_jobs (id, kind, tenant, max_attempts, payload, payload_sha256, run_after,
                         priority, created_at, updated_at, variant, state, wait, labels,
                         traceparent, principal, version)
SELECT json_extract(g.value, '$[0]'), :kind, :tenant, :max_attempts,
       json_extract(g.value, '$[2]'), json_extract(g.value, '$[1]'),
       CASE WHEN json_extract(g.value, '$[5]') THEN 253402300799.0
            ELSE COALESCE(:run_at, :now + :delay) END,
       :priority, :now, :now, json_extract(g.value, '$[4]'),
       CASE WHEN json_extract(g.value, '$[5]') THEN 'waiting' ELSE 'queued' END,
       CASE WHEN json_extract(g.value, '$[5]') THEN json('{"for": "signal", "name": "release", "position": -1, "held": true}') END,
       :labels, :traceparent, :principal, (SELECT version FROM tenure_kinds WHERE kind = :kind)
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

-- name: exchange__exhausted
UPDATE tenure_jobs
SET state = 'failed', lease_until = NULL, updated_at = :now,
    error = json_object('code', 'lease_expired',
                        'message', 'the lease of the last allowed attempt expired')
WHERE state = 'running' AND lease_until <= :now AND attempt >= max_attempts
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
RETURNING id, fencing_token, owner_id, attempt, parent_id;

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
SELECT id, state, owner_id FROM (
    SELECT * FROM (
        SELECT id, state, owner_id, priority, rowid AS position FROM tenure_jobs
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
        SELECT id, state, owner_id, priority, rowid AS position FROM tenure_jobs
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
        SELECT id, state, owner_id, priority, rowid AS position FROM tenure_jobs
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
    heartbeat_at = :now, fencing_token = fencing_token + 1, attempt = attempt + 1,
    updated_at = :now
WHERE id = :id
RETURNING id, kind, tenant, fencing_token, attempt, max_attempts, payload, step, checkpoint,
          lease_until, wait, variant, labels, traceparent, principal, :now AS claimed_at;

-- name: extend_many
-- guard: lease
UPDATE tenure_jobs
SET lease_until = :now + :lease_seconds, heartbeat_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id, lease_until;

-- name: save_step
-- guard: lease
UPDATE tenure_jobs
SET step = :step, checkpoint = :checkpoint, updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id;

-- name: exchange__complete
-- guard: lease
UPDATE tenure_jobs
SET state = 'succeeded', result = :result, lease_until = NULL, updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id, parent_id;

-- name: fail
-- guard: lease
UPDATE tenure_jobs
SET state = CASE WHEN :retry_delay IS NOT NULL AND attempt < max_attempts
                 THEN 'queued' ELSE 'failed' END,
    run_after = CASE WHEN :retry_delay IS NOT NULL AND attempt < max_attempts
                     THEN :now + :retry_delay ELSE run_after END,
    owner_id = CASE WHEN :retry_delay IS NOT NULL AND attempt < max_attempts
                    THEN NULL ELSE owner_id END,
    lease_until = NULL, error = :error, updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id, state, attempt, run_after, parent_id;

-- name: release
-- guard: lease
UPDATE tenure_jobs
SET state = 'queued', owner_id = NULL, lease_until = NULL, attempt = attempt - 1,
    run_after = :now, updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id;

-- name: cancel__was
SELECT state FROM tenure_jobs WHERE id = :job_id;

-- name: cancel
UPDATE tenure_jobs
SET state = 'cancelled', fencing_token = fencing_token + 1, lease_until = NULL,
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
  AND (:after IS NULL
       OR rowid < (SELECT rowid FROM tenure_jobs WHERE id = :after))
ORDER BY rowid DESC
LIMIT :limit;

-- name: events
-- Each event with the job's class version and idempotency key; an effect's events (found by
-- the stage position in their detail) with the effect's key instead.
SELECT e.seq, e.job_id, e.type, e.at, e.token, e.owner_id, e.detail,
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

-- name: stages
SELECT position, name, kind, status, token, result
FROM tenure_stages
WHERE job_id = :job_id
ORDER BY position;

-- name: stage_start
-- guard: lease
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
-- guard: lease
UPDATE tenure_jobs
SET updated_at = :now
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now
RETURNING id;

-- name: stage_raised__stage
DELETE FROM tenure_stages
WHERE job_id = :job_id AND position = :position AND status = 'started' AND kind = 'step';

-- name: stage_done
-- guard: lease
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

-- The fence receiver (FenceGuard): steps of one BEGIN IMMEDIATE transaction.

-- name: fence_highest__lock
INSERT INTO tenure_fence_scopes (scope, highest, updated_at)
VALUES (:scope, 0, :now)
ON CONFLICT (scope) DO NOTHING;

-- name: fence_highest
SELECT highest FROM tenure_fence_scopes WHERE scope = :scope;

-- name: fence_get
SELECT status, fence, result, :now - started_at AS age
FROM tenure_fence_results
WHERE scope = :scope AND key = :key;

-- name: fence_begin
INSERT INTO tenure_fence_results (key, scope, fence, status, started_at)
VALUES (:key, :scope, :fence, 'running', :now)
ON CONFLICT (scope, key) DO UPDATE
SET fence = excluded.fence, status = 'running', result = NULL,
    started_at = excluded.started_at, finished_at = NULL;

-- name: fence_raise_highest
UPDATE tenure_fence_scopes
SET highest = MAX(highest, :fence), updated_at = :now
WHERE scope = :scope;

-- name: fence_finish
UPDATE tenure_fence_results
SET status = 'done', result = :result, finished_at = :now
WHERE scope = :scope AND key = :key AND status = 'running' AND fence = :fence
RETURNING key;

-- name: fence_forget
DELETE FROM tenure_fence_results
WHERE scope = :scope AND key = :key AND status = 'running' AND fence = :fence;

-- name: fence_lookup
SELECT status, fence, result, (julianday('now') - 2440587.5) * 86400.0 - started_at AS age
FROM tenure_fence_results
WHERE key = :key AND (:scope IS NULL OR scope = :scope)
ORDER BY started_at DESC
LIMIT 1;

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

-- name: declare_labels
-- `kinds` is a JSON object of kind -> the labels its job class declares.
INSERT INTO tenure_kinds (kind, labels, updated_at)
SELECT g.key, json(g.value), :now FROM json_each(:kinds) AS g WHERE true
ON CONFLICT (kind) DO UPDATE SET labels = excluded.labels, updated_at = excluded.updated_at
WHERE tenure_kinds.labels IS NOT excluded.labels;

-- name: declared_labels
SELECT kind, labels FROM tenure_kinds WHERE json_type(labels) = 'object' ORDER BY kind;

-- name: create_tenant
INSERT INTO tenure_tenants (name, created_at) VALUES (:tenant, :now)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: add_api_key
INSERT INTO tenure_api_keys (key_id, tenant, key_sha256, created_at)
SELECT :key_id, t.name, :key_sha256, :now FROM tenure_tenants t WHERE t.name = :tenant
RETURNING key_id;

-- name: api_key
SELECT key_id, tenant, key_sha256, revoked_at IS NOT NULL AS revoked
FROM tenure_api_keys WHERE key_id = :key_id;

-- name: revoke_api_keys
UPDATE tenure_api_keys SET revoked_at = :now
WHERE tenant = :tenant AND revoked_at IS NULL AND (:key_id IS NULL OR key_id = :key_id)
RETURNING key_id;

-- name: tenants
SELECT t.name, t.created_at,
       count(k.key_id) FILTER (WHERE k.revoked_at IS NULL) AS active_keys,
       count(k.key_id) FILTER (WHERE k.revoked_at IS NOT NULL) AS revoked_keys
FROM tenure_tenants t LEFT JOIN tenure_api_keys k ON k.tenant = t.name
GROUP BY t.name, t.created_at
ORDER BY t.name;

-- name: purge_preview
-- What a purge with these ages would delete now (jobs), and keep for their keys.
WITH clock AS (SELECT (julianday('now') - 2440587.5) * 86400.0 AS now)
SELECT count(*) FILTER (WHERE j.idempotency_key IS NULL
                           OR j.updated_at < clock.now - :keep_keys) AS jobs,
       count(*) FILTER (WHERE j.idempotency_key IS NOT NULL
                          AND j.updated_at >= clock.now - :keep_keys) AS kept_for_keys
FROM tenure_jobs j CROSS JOIN clock
WHERE j.state IN ('succeeded', 'failed', 'cancelled')
  AND j.updated_at < clock.now - :older_than
  -- A child whose parent has not ended is kept: the parent may still read it.
  AND (j.parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM tenure_jobs p WHERE p.id = j.parent_id
                      AND p.state NOT IN ('succeeded', 'failed', 'cancelled')));

-- name: purge_batch__scan
-- The next `scan` jobs in submission order (rowid) for one bounded purge step.
-- `parent_open`: a child whose parent has not ended, kept (the parent may still wait for it).
SELECT j.rowid AS seq, j.id, j.state, j.updated_at, j.created_at, j.idempotency_key,
       (j.parent_id IS NOT NULL AND NOT NOT EXISTS (SELECT 1 FROM tenure_jobs p WHERE p.id = j.parent_id
                      AND p.state NOT IN ('succeeded', 'failed', 'cancelled'))) AS parent_open
FROM tenure_jobs j
WHERE j.rowid > :after ORDER BY j.rowid LIMIT :scan;

-- name: purge_batch__events
DELETE FROM tenure_events WHERE job_id IN (SELECT value FROM json_each(:ids));

-- name: purge_batch__stages
DELETE FROM tenure_stages WHERE job_id IN (SELECT value FROM json_each(:ids));

-- name: purge_batch__effects
DELETE FROM tenure_effects WHERE job_id IN (SELECT value FROM json_each(:ids));

-- name: purge_batch__jobs
DELETE FROM tenure_jobs
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN ('succeeded', 'failed', 'cancelled');

-- Fair scheduling (inside the claim's IMMEDIATE transaction: counts and choice are exact).

-- name: tenant_limits
SELECT name, max_running FROM tenure_limits WHERE scope = 'tenant' ORDER BY name;

-- name: set_tenant_limit
INSERT INTO tenure_limits (scope, name, max_running) VALUES ('tenant', :name, :n)
ON CONFLICT (scope, name) DO UPDATE SET max_running = excluded.max_running
RETURNING name;

-- name: set_tenant_limit__clear
DELETE FROM tenure_limits WHERE scope = 'tenant' AND name = :name RETURNING name;

-- name: limited_claim__running
SELECT tenant, kind, count(*) AS running FROM tenure_jobs
WHERE state = 'running' AND lease_until > :now
GROUP BY tenant, kind;

-- name: limited_claim__window
SELECT id, tenant, kind FROM (
    SELECT * FROM (
        SELECT id, tenant, kind, priority, rowid AS position FROM tenure_jobs
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
        SELECT id, tenant, kind, priority, rowid AS position FROM tenure_jobs
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
        SELECT id, tenant, kind, priority, rowid AS position FROM tenure_jobs
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

-- Runs that wait (see storage.waits): steps of one BEGIN IMMEDIATE transaction each.

-- name: signal
SELECT kind, state, fencing_token,
       state = 'waiting' AND json_extract(wait, '$.for') = 'signal'
           AND json_extract(wait, '$.name') = :name AS waits_for_it
FROM tenure_jobs WHERE id = :job_id;

-- name: signal__existing
SELECT payload_sha256 AS existing FROM tenure_signals WHERE job_id = :job_id AND name = :name;

-- name: signal__insert
INSERT INTO tenure_signals (job_id, name, payload, payload_sha256, at)
VALUES (:job_id, :name, :payload, :payload_sha256, :now);

-- name: signal__wake
UPDATE tenure_jobs SET run_after = :now WHERE id = :job_id AND state = 'waiting';

-- name: wait__lock
-- guard: lease
SELECT wait, :now AS now FROM tenure_jobs
WHERE id = :job_id AND state = 'running' AND owner_id = :owner_id
  AND fencing_token = :token AND lease_until > :now;

-- name: wait__signal
SELECT payload FROM tenure_signals WHERE job_id = :job_id AND name = :name;

-- name: wait__children
SELECT id, state, result, error FROM tenure_jobs
WHERE parent_id = :job_id AND id IN (SELECT value FROM json_each(:ids));

-- name: wait__settle
-- guard: lease
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
-- guard: lease
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

-- Rollouts (see ledger.rollouts): one row per kind; the breaker trips in one conditional write.

-- name: start_rollout
INSERT INTO tenure_rollouts (kind, variant, tenants, percent, max_failure_rate, max_cost_ratio,
                             min_jobs, on_trip, state, started_at)
VALUES (:kind, :variant, :tenants, :percent, :max_failure_rate, :max_cost_ratio, :min_jobs,
        :on_trip, 'active', :now)
ON CONFLICT (kind) DO NOTHING
RETURNING kind;

-- name: rollouts
SELECT kind, variant, tenants, percent, max_failure_rate, max_cost_ratio, min_jobs, on_trip,
       state, started_at, tripped_at, trip
FROM tenure_rollouts ORDER BY kind;

-- name: stop_rollout
DELETE FROM tenure_rollouts WHERE kind = :kind RETURNING kind;

-- name: trip_rollout
UPDATE tenure_rollouts SET state = 'tripped', tripped_at = :now, trip = :trip
WHERE kind = :kind AND state = 'active'
RETURNING kind;

-- name: report_cost
INSERT INTO tenure_costs (job_id, attempt, tokens, usd, at)
VALUES (:job_id, :attempt, :tokens, :usd, :now);

-- name: job_cost
-- What the attempts of one job reported they spent (no row: no such job).
SELECT (SELECT COALESCE(sum(c.tokens), 0) FROM tenure_costs c WHERE c.job_id = j.id) AS tokens,
       (SELECT COALESCE(sum(c.usd), 0) FROM tenure_costs c WHERE c.job_id = j.id) AS usd
FROM tenure_jobs j WHERE j.id = :job_id;

-- name: rollout_jobs
-- The jobs of a kind since its rollout started (of one tenant, or all), each with what it
-- cost and its steps in doubt. The start is compared in SQL: a time that went through Python
-- and back can land a rounding above the stored one and miss a job of the same millisecond.
SELECT j.variant, j.state, j.attempt, j.created_at, j.updated_at,
       (SELECT COALESCE(sum(c.tokens), 0) FROM tenure_costs c WHERE c.job_id = j.id) AS tokens,
       (SELECT COALESCE(sum(c.usd), 0) FROM tenure_costs c WHERE c.job_id = j.id) AS usd,
       (SELECT count(*) FROM tenure_events e
        WHERE e.job_id = j.id AND e.type = 'step_in_doubt') AS in_doubt
FROM tenure_jobs j
WHERE j.kind = :kind
  AND j.created_at >= (SELECT r.started_at FROM tenure_rollouts r WHERE r.kind = :kind)
  AND (:tenant IS NULL OR j.tenant = :tenant);

-- Evidence (see storage.sql_evidence): references written with the lease, the retrieval
-- cache per tenant, the class versions apps declare.

-- name: record_evidence
-- guard: lease
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
