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
-- LeaseLost (tests/test_queries.py checks the predicate and the parity with SQLite).

-- name: now
SELECT clock_timestamp() AS now;


-- name: submit
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
inserted AS (
    -- A job held by a tripped rollout waits for the signal `release`, due never until then.
    INSERT INTO tenure_jobs (id, kind, tenant, max_attempts, idempotency_key, payload,
                             payload_sha256, run_after, priority, created_at, updated_at,
                             parent_id, variant, state, wait, labels, traceparent, principal,
                             version)
    SELECT %(id)s::uuid, %(kind)s, %(tenant)s, %(max_attempts)s, %(idempotency_key)s,
           %(payload)s::jsonb, %(payload_sha256)s,
           CASE WHEN %(held)s THEN '9999-12-31T00:00:00Z'::timestamptz
                ELSE COALESCE(%(run_at)s::timestamptz,
                              clock.now + make_interval(secs => %(delay)s)) END,
           %(priority)s, clock.now, clock.now, %(parent_id)s::uuid, %(variant)s,
           CASE WHEN %(held)s THEN 'waiting' ELSE 'queued' END,
           CASE WHEN %(held)s THEN '{"for": "signal", "name": "release", "position": -1, "held": true}'::jsonb END,
           %(labels)s::jsonb, %(traceparent)s, %(principal)s,
           (SELECT version FROM tenure_kinds WHERE kind = %(kind)s)
    FROM clock
    ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, created_at, kind, run_after <= created_at AS due
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, 'job_submitted', created_at, 0, NULL, %(detail)s::jsonb FROM inserted
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
                             traceparent, principal, version)
    SELECT given.id, %(kind)s, %(tenant)s, %(max_attempts)s, given.payload,
           given.payload_sha256,
           CASE WHEN given.held THEN '9999-12-31T00:00:00Z'::timestamptz
                ELSE COALESCE(%(run_at)s::timestamptz,
                              clock.now + make_interval(secs => %(delay)s)) END,
           %(priority)s, clock.now, clock.now, given.variant,
           CASE WHEN given.held THEN 'waiting' ELSE 'queued' END,
           CASE WHEN given.held THEN '{"for": "signal", "name": "release", "position": -1, "held": true}'::jsonb END,
           %(labels)s::jsonb, %(traceparent)s, %(principal)s,
           (SELECT version FROM tenure_kinds WHERE kind = %(kind)s)
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

-- name: exchange
-- guard: lease
-- One statement publishes a batch of results (each guarded by its lease) and
-- claims the next jobs: a busy worker pays one round trip and one commit for both. A plain
-- claim passes no results; a plain batch of completes claims nothing (no kinds, limit 0).
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now, tenure_token_floor() AS token_floor),
-- `given` maps each job id to {"o": owner, "t": token, "r": result, "d": event detail}, as in
-- extend_many (found by primary key, checked against the map, no join).
given AS MATERIALIZED (SELECT %(given)s::jsonb AS results),
done AS (
    UPDATE tenure_jobs j
    SET state = 'succeeded', result = given.results -> j.id::text -> 'r', lease_until = NULL,
        updated_at = clock.now
    FROM given, clock
    WHERE j.id = ANY (%(job_ids)s::uuid[]) AND j.state || '' = 'running'
      AND j.owner_id = given.results -> j.id::text ->> 'o'
      AND j.fencing_token = (given.results -> j.id::text ->> 't')::bigint
      AND j.lease_until > clock.now
    RETURNING j.id, clock.now AS at, j.fencing_token AS token, j.owner_id, j.parent_id,
              given.results -> j.id::text -> 'd' AS detail,
              -- Waiters (ledger.wait, the service's long-poll) answer at once.
              pg_notify('tenure_ended:' || current_schema(), j.id::text) AS told
),
done_logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, 'job_succeeded', at, token, owner_id, detail FROM done
),
exhausted AS (
    SELECT j.id FROM tenure_jobs j, clock
    WHERE j.state = 'running' AND j.lease_until <= (SELECT now FROM clock)
      AND j.attempt >= j.max_attempts
      AND (%(kinds)s::text[] IS NULL OR j.kind = ANY (%(kinds)s::text[]))
    FOR UPDATE OF j SKIP LOCKED
),
expired_out AS (
    UPDATE tenure_jobs j
    SET state = 'failed', lease_until = NULL, updated_at = clock.now,
        error = jsonb_build_object('code', 'lease_expired',
                                   'message', 'the lease of the last allowed attempt expired')
    FROM exhausted, clock
    WHERE j.id = exhausted.id
    RETURNING j.id, j.fencing_token, j.owner_id, j.attempt, j.parent_id, clock.now AS at,
              pg_notify('tenure_ended:' || current_schema(), j.id::text) AS told
),
-- A child that ended wakes its parent if the parent waits for it. The parent's row is locked
-- whatever its state: a parent suspending at this moment holds that lock, so either its
-- suspend sees this child ended, or this update runs after it and sees it waiting.
ended AS (
    SELECT parent_id, array_agg(id::text) AS ids FROM (
        SELECT id, parent_id FROM done UNION ALL SELECT id, parent_id FROM expired_out
    ) AS children
    WHERE parent_id IS NOT NULL
    GROUP BY parent_id
),
parents_woken AS (
    UPDATE tenure_jobs p
    SET run_after = CASE WHEN p.state = 'waiting' AND p.wait -> 'jobs' ?| ended.ids
                         THEN clock.now ELSE p.run_after END
    FROM ended, clock
    WHERE p.id = ended.parent_id
    RETURNING CASE WHEN p.state = 'waiting' AND p.run_after = clock.now
                   THEN pg_notify('tenure_jobs:' || current_schema(), p.kind) END AS told
),
-- Two scans, each on its own partial index and stopping at the limit: an OR of both would
-- read and sort every queued row on each claim.
expired_candidate AS (
    SELECT j.id, j.state AS was_state, j.owner_id AS was_owner, j.fencing_token AS was_token,
           j.priority, j.seq
    FROM tenure_jobs j, clock
    WHERE j.state = 'running' AND j.lease_until <= (SELECT now FROM clock)
      AND j.attempt < j.max_attempts
      AND (%(kinds)s::text[] IS NULL OR j.kind = ANY (%(kinds)s::text[]))
      AND (NOT (j.kind = ANY (%(pinned_kinds)s::text[]))
           OR j.kind || '@' || COALESCE(j.variant, 'stable') = ANY (%(pinned)s::text[]))
      AND (%(only_ids)s::uuid[] IS NULL OR j.id = ANY (%(only_ids)s::uuid[]))
    ORDER BY j.lease_until
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
),
queued_candidate AS (
    SELECT j.id, j.state AS was_state, j.owner_id AS was_owner, j.fencing_token AS was_token,
           j.priority, j.seq
    FROM tenure_jobs j, clock
    WHERE j.state = 'queued' AND j.run_after <= clock.now
      AND (%(kinds)s::text[] IS NULL OR j.kind = ANY (%(kinds)s::text[]))
      AND (NOT (j.kind = ANY (%(pinned_kinds)s::text[]))
           OR j.kind || '@' || COALESCE(j.variant, 'stable') = ANY (%(pinned)s::text[]))
      AND (%(only_ids)s::uuid[] IS NULL OR j.id = ANY (%(only_ids)s::uuid[]))
    ORDER BY j.priority DESC, j.seq
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
),
-- Waits whose time came (a timer, a timeout, or a signal or child that set run_after to now):
-- no sweeper, the claim finds them, on their own index; waits in the future cost nothing.
waiting_candidate AS (
    SELECT j.id, j.state AS was_state, j.owner_id AS was_owner, j.fencing_token AS was_token,
           j.priority, j.seq
    FROM tenure_jobs j
    WHERE j.state = 'waiting' AND j.run_after <= (SELECT now FROM clock)
      AND (%(kinds)s::text[] IS NULL OR j.kind = ANY (%(kinds)s::text[]))
      AND (NOT (j.kind = ANY (%(pinned_kinds)s::text[]))
           OR j.kind || '@' || COALESCE(j.variant, 'stable') = ANY (%(pinned)s::text[]))
      AND (%(only_ids)s::uuid[] IS NULL OR j.id = ANY (%(only_ids)s::uuid[]))
    ORDER BY j.run_after
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
),
candidate AS (
    SELECT id, was_state, was_owner, was_token FROM (
        SELECT * FROM expired_candidate UNION ALL SELECT * FROM queued_candidate
        UNION ALL SELECT * FROM waiting_candidate
    ) AS both_kinds
    ORDER BY priority DESC, seq
    LIMIT %(limit)s
),
claimed AS (
    UPDATE tenure_jobs j
    SET state = 'running', owner_id = %(owner_id)s,
        lease_until = clock.now + make_interval(secs => %(lease_seconds)s),
        heartbeat_at = clock.now,
        -- Invariant 16: above every token of an earlier timeline (migration 0010).
        fencing_token = GREATEST(j.fencing_token + 1, clock.token_floor + 1),
        attempt = j.attempt + 1, updated_at = clock.now
    FROM candidate, clock
    WHERE j.id = candidate.id
    RETURNING j.id, j.kind, j.tenant, j.fencing_token, j.attempt, j.max_attempts, j.payload,
              j.step, j.checkpoint, j.lease_until, j.priority, j.seq, j.wait, j.variant,
              j.labels, j.traceparent, j.principal, clock.now AS claimed_at, candidate.was_state,
              candidate.was_owner, candidate.was_token
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT job_id, type, at, token, owner_id, detail FROM (
        SELECT e.id AS job_id, 'lease_expired' AS type, e.at, e.fencing_token AS token,
               e.owner_id, jsonb_build_object('attempt', e.attempt, 'then', 'failed') AS detail,
               1 AS ord
        FROM expired_out e
        UNION ALL
        SELECT e.id, 'job_failed', e.at, e.fencing_token, e.owner_id,
               jsonb_build_object('code', 'lease_expired', 'attempt', e.attempt), 2
        FROM expired_out e
        UNION ALL
        SELECT c.id, 'lease_expired', c.claimed_at, c.was_token, c.was_owner,
               jsonb_build_object('attempt', c.attempt - 1, 'then', 'reclaimed'), 3
        FROM claimed c WHERE c.was_state = 'running'
        UNION ALL
        SELECT c.id, 'job_resumed', c.claimed_at, c.fencing_token, %(owner_id)s,
               jsonb_build_object('waited_for', c.wait -> 'for', 'position', c.wait -> 'position'),
               4
        FROM claimed c WHERE c.was_state = 'waiting'
        UNION ALL
        SELECT c.id, 'job_claimed', c.claimed_at, c.fencing_token, %(owner_id)s,
               jsonb_build_object('attempt', c.attempt, 'lease_until', c.lease_until), 5
        FROM claimed c
    ) AS pending
    ORDER BY ord, job_id
)
SELECT 'claimed' AS outcome, id::text AS id, kind, tenant, fencing_token, attempt,
       max_attempts, payload, step, checkpoint, lease_until, claimed_at, priority, seq, wait,
       variant, labels, traceparent, principal
FROM claimed
UNION ALL
SELECT 'completed', id::text, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL
FROM done
ORDER BY outcome, priority DESC, seq;

-- name: extend_many
-- guard: lease
-- `held` maps each job id to [owner, token, seconds]; rows are found by primary key (id = ANY)
-- and checked against the map: no join, so the cost stays linear in the batch (10,000 leases
-- in one statement) whatever plan the statistics suggest.
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
held AS MATERIALIZED (SELECT %(held)s::jsonb AS leases)
UPDATE tenure_jobs j
SET lease_until = clock.now + make_interval(secs => (held.leases -> j.id::text ->> 2)::float8),
    heartbeat_at = clock.now
FROM clock, held
WHERE j.id = ANY (%(job_ids)s::uuid[]) AND j.state || '' = 'running'
  AND j.owner_id = held.leases -> j.id::text ->> 0
  AND j.fencing_token = (held.leases -> j.id::text ->> 1)::bigint
  AND j.lease_until > clock.now
RETURNING j.id::text AS id, j.lease_until;

-- name: save_step
-- guard: lease
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

-- name: fail
-- guard: lease
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
failed AS (
    UPDATE tenure_jobs j
    SET state = CASE WHEN %(retry_delay)s::float8 IS NOT NULL AND j.attempt < j.max_attempts
                     THEN 'queued' ELSE 'failed' END,
        run_after = CASE WHEN %(retry_delay)s::float8 IS NOT NULL AND j.attempt < j.max_attempts
                         THEN clock.now + make_interval(secs => %(retry_delay)s::float8)
                         ELSE j.run_after END,
        owner_id = CASE WHEN %(retry_delay)s::float8 IS NOT NULL AND j.attempt < j.max_attempts
                        THEN NULL ELSE j.owner_id END,
        lease_until = NULL, error = %(error)s::jsonb, updated_at = clock.now
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
      AND j.fencing_token = %(token)s AND j.lease_until > clock.now
    RETURNING j.id, j.state, j.attempt, j.run_after, j.parent_id, clock.now AS at,
              CASE WHEN j.state = 'failed'
                   THEN pg_notify('tenure_ended:' || current_schema(), j.id::text) END AS told
),
-- A child that failed for good wakes its waiting parent (see exchange's parents_woken).
parent_woken AS (
    UPDATE tenure_jobs p
    SET run_after = CASE WHEN p.state = 'waiting' AND p.wait -> 'jobs' ? failed.id::text
                         THEN clock.now ELSE p.run_after END
    FROM failed, clock
    WHERE p.id = failed.parent_id AND failed.state = 'failed'
    RETURNING CASE WHEN p.state = 'waiting' AND p.run_after = clock.now
                   THEN pg_notify('tenure_jobs:' || current_schema(), p.kind) END AS told
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, CASE WHEN state = 'queued' THEN 'job_retry_scheduled' ELSE 'job_failed' END,
           at, %(token)s, %(owner_id)s,
           %(detail)s::jsonb || jsonb_build_object('attempt', attempt, 'run_after', run_after)
    FROM failed
)
SELECT id::text AS id, state FROM failed;

-- name: release
-- guard: lease
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
released AS (
    UPDATE tenure_jobs j
    SET state = 'queued', owner_id = NULL, lease_until = NULL, attempt = j.attempt - 1,
        run_after = clock.now, updated_at = clock.now
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
      AND j.fencing_token = %(token)s AND j.lease_until > clock.now
    RETURNING j.id, j.kind, clock.now AS at
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, 'job_released', at, %(token)s, %(owner_id)s, '{}'::jsonb FROM released
)
SELECT id::text AS id FROM released
CROSS JOIN LATERAL (SELECT pg_notify('tenure_jobs:' || current_schema(), released.kind)) AS woken;

-- name: cancel__lock
-- The job and its unfinished descendants, locked deepest first: a child that ends locks itself
-- and then its parent, so taking the same rows in the same order cannot deadlock with it.
WITH RECURSIVE tree AS (
    SELECT id, 0 AS depth FROM tenure_jobs
    WHERE id = %(job_id)s::uuid AND state IN ('queued', 'running', 'waiting')
    UNION
    SELECT c.id, tree.depth + 1 FROM tenure_jobs c JOIN tree ON c.parent_id = tree.id
    WHERE c.state IN ('queued', 'running', 'waiting')
)
SELECT j.id FROM tenure_jobs j JOIN tree ON tree.id = j.id
ORDER BY tree.depth DESC
FOR UPDATE OF j;

-- name: cancel
-- The job and its unfinished descendants, each token bumped: a parent's children run for it.
-- Runs after cancel__lock in one transaction (a fresh snapshot: the rows as locked).
WITH RECURSIVE clock AS MATERIALIZED (SELECT clock_timestamp() AS now, tenure_token_floor() AS token_floor),
tree AS (
    SELECT id, state, parent_id, true AS root FROM tenure_jobs
    WHERE id = %(job_id)s::uuid AND state IN ('queued', 'running', 'waiting')
    UNION
    SELECT c.id, c.state, c.parent_id, false FROM tenure_jobs c JOIN tree ON c.parent_id = tree.id
    WHERE c.state IN ('queued', 'running', 'waiting')
),
cancelled AS (
    UPDATE tenure_jobs j
    SET state = 'cancelled', fencing_token = GREATEST(j.fencing_token + 1, clock.token_floor + 1),
        lease_until = NULL,
        updated_at = clock.now
    FROM clock, tree
    WHERE j.id = tree.id AND j.state IN ('queued', 'running', 'waiting')
    RETURNING j.id, j.fencing_token, j.owner_id, j.parent_id, tree.root, tree.state AS was,
              clock.now AS at
),
-- A cancelled child wakes its waiting parent (see exchange's parents_woken).
parent_woken AS (
    UPDATE tenure_jobs p
    SET run_after = CASE WHEN p.state = 'waiting' AND p.wait -> 'jobs' ? c.id::text
                         THEN clock.now ELSE p.run_after END
    FROM cancelled c, clock
    WHERE p.id = c.parent_id AND c.root
    RETURNING CASE WHEN p.state = 'waiting' AND p.run_after = clock.now
                   THEN pg_notify('tenure_jobs:' || current_schema(), p.kind) END AS told
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT c.id, 'job_cancelled', c.at, c.fencing_token, c.owner_id,
           CASE WHEN c.root THEN jsonb_build_object('was', c.was)
                ELSE jsonb_build_object('was', c.was, 'by_parent', c.parent_id) END
    FROM cancelled c
)
-- The owning worker (any listening worker) stops the run at once instead of at its next renewal.
SELECT id::text AS id, root FROM cancelled
CROSS JOIN LATERAL (
    SELECT pg_notify('tenure_cancel:' || current_schema(),
                     cancelled.id::text || ':' || cancelled.fencing_token)
) AS told;

-- name: requeue
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
before AS (
    SELECT id, state FROM tenure_jobs WHERE id = %(job_id)s::uuid
),
requeued AS (
    UPDATE tenure_jobs j
    SET state = 'queued', attempt = 0, owner_id = NULL, lease_until = NULL, error = NULL,
        run_after = clock.now, updated_at = clock.now
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state IN ('failed', 'cancelled')
    RETURNING j.id, j.kind, j.fencing_token, clock.now AS at
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT r.id, 'job_requeued', r.at, r.fencing_token, NULL, jsonb_build_object('was', b.state)
    FROM requeued r JOIN before b ON b.id = r.id
)
SELECT id::text AS id FROM requeued
CROSS JOIN LATERAL (SELECT pg_notify('tenure_jobs:' || current_schema(), requeued.kind)) AS woken;

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
  AND (%(after)s::uuid IS NULL
       OR seq < (SELECT seq FROM tenure_jobs WHERE id = %(after)s::uuid))
ORDER BY seq DESC
LIMIT %(limit)s;

-- name: events
-- Each event with the job's class version and idempotency key; an effect's events (found by
-- the stage position in their detail) with the effect's key instead.
SELECT e.seq, e.job_id::text AS job_id, e.type, e.at, e.token, e.owner_id, e.detail,
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

-- name: stages
SELECT position, name, kind, status, token, result
FROM tenure_stages
WHERE job_id = %(job_id)s::uuid
ORDER BY position;

-- name: stage_start
-- guard: lease
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
-- guard: lease
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
-- guard: lease
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

-- The fence receiver (FenceGuard). The decision is made in Python inside one transaction that
-- holds the scope's row lock; these are its steps.

-- name: fence_highest__lock
WITH created AS (
    INSERT INTO tenure_fence_scopes (scope, highest, updated_at)
    VALUES (%(scope)s, 0, clock_timestamp())
    ON CONFLICT (scope) DO NOTHING
)
SELECT 1 AS ok;

-- name: fence_highest
SELECT highest FROM tenure_fence_scopes WHERE scope = %(scope)s FOR UPDATE;

-- name: fence_get
SELECT status, fence, result, EXTRACT(EPOCH FROM clock_timestamp() - started_at) AS age
FROM tenure_fence_results
WHERE scope = %(scope)s AND key = %(key)s
FOR UPDATE;

-- name: fence_begin
INSERT INTO tenure_fence_results (key, scope, fence, status, started_at)
VALUES (%(key)s, %(scope)s, %(fence)s, 'running', clock_timestamp())
ON CONFLICT (scope, key) DO UPDATE
SET fence = EXCLUDED.fence, status = 'running', result = NULL,
    started_at = EXCLUDED.started_at, finished_at = NULL;

-- name: fence_raise_highest
UPDATE tenure_fence_scopes
SET highest = GREATEST(highest, %(fence)s), updated_at = clock_timestamp()
WHERE scope = %(scope)s;

-- name: fence_finish
UPDATE tenure_fence_results
SET status = 'done', result = %(result)s::jsonb, finished_at = clock_timestamp()
WHERE scope = %(scope)s AND key = %(key)s AND status = 'running' AND fence = %(fence)s
RETURNING key;

-- name: fence_forget
DELETE FROM tenure_fence_results
WHERE scope = %(scope)s AND key = %(key)s AND status = 'running' AND fence = %(fence)s;

-- name: fence_lookup
SELECT status, fence, result, EXTRACT(EPOCH FROM clock_timestamp() - started_at) AS age
FROM tenure_fence_results
WHERE key = %(key)s AND (%(scope)s::text IS NULL OR scope = %(scope)s::text)
ORDER BY started_at DESC
LIMIT 1;

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

-- name: declare_labels
-- `kinds` is a JSON object of kind -> the labels its job class declares.
INSERT INTO tenure_kinds (kind, labels, updated_at)
SELECT g.key, g.value, clock_timestamp() FROM jsonb_each(%(kinds)s::jsonb) AS g
ON CONFLICT (kind) DO UPDATE SET labels = EXCLUDED.labels, updated_at = EXCLUDED.updated_at
WHERE tenure_kinds.labels IS DISTINCT FROM EXCLUDED.labels;

-- name: declared_labels
SELECT kind, labels FROM tenure_kinds WHERE jsonb_typeof(labels) = 'object' ORDER BY kind;

-- name: create_tenant
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
tenant AS (
    INSERT INTO tenure_tenants (name, created_at)
    SELECT %(tenant)s, clock.now FROM clock
    ON CONFLICT (name) DO NOTHING
    RETURNING name, created_at
)
INSERT INTO tenure_api_keys (key_id, tenant, key_sha256, created_at)
SELECT %(key_id)s, tenant.name, %(key_sha256)s, tenant.created_at FROM tenant
RETURNING key_id;

-- name: add_api_key
INSERT INTO tenure_api_keys (key_id, tenant, key_sha256, created_at)
SELECT %(key_id)s, t.name, %(key_sha256)s, clock_timestamp()
FROM tenure_tenants t WHERE t.name = %(tenant)s
RETURNING key_id;

-- name: api_key
SELECT key_id, tenant, key_sha256, revoked_at IS NOT NULL AS revoked
FROM tenure_api_keys WHERE key_id = %(key_id)s;

-- name: revoke_api_keys
UPDATE tenure_api_keys SET revoked_at = clock_timestamp()
WHERE tenant = %(tenant)s AND revoked_at IS NULL
  AND (%(key_id)s::text IS NULL OR key_id = %(key_id)s::text)
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
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT count(*) FILTER (WHERE j.idempotency_key IS NULL
                           OR j.updated_at < clock.now - make_interval(secs => %(keep_keys)s))
           AS jobs,
       count(*) FILTER (WHERE j.idempotency_key IS NOT NULL
                          AND j.updated_at >= clock.now - make_interval(secs => %(keep_keys)s))
           AS kept_for_keys
FROM tenure_jobs j, clock
WHERE j.state IN ('succeeded', 'failed', 'cancelled')
  AND j.updated_at < clock.now - make_interval(secs => %(older_than)s)
  -- A child whose parent has not ended is kept: the parent may still read it.
  AND (j.parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM tenure_jobs p WHERE p.id = j.parent_id
                      AND p.state NOT IN ('succeeded', 'failed', 'cancelled')));

-- name: purge_batch
-- One bounded step of a purge: the next `scan` jobs in submission order; of those, the
-- terminal ones older than the cutoff (keyed ones only past the key window) are deleted with
-- their events, stages and effects. FOR UPDATE re-checks each row as it is now, so a job
-- requeued meanwhile is kept; one locked by someone else is skipped.
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
scanned AS (
    SELECT id, seq, state, updated_at, created_at, idempotency_key FROM tenure_jobs
    WHERE seq > %(after)s ORDER BY seq LIMIT %(scan)s
),
doomed AS (
    SELECT j.id FROM tenure_jobs j JOIN scanned ON scanned.id = j.id, clock
    WHERE j.state IN ('succeeded', 'failed', 'cancelled')
      AND j.updated_at < clock.now - make_interval(secs => %(older_than)s)
      AND (j.idempotency_key IS NULL
           OR j.updated_at < clock.now - make_interval(secs => %(keep_keys)s))
      -- A child whose parent has not ended is kept: the parent may still wait for it.
      AND (j.parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM tenure_jobs p WHERE p.id = j.parent_id
                      AND p.state NOT IN ('succeeded', 'failed', 'cancelled')))
    FOR UPDATE OF j SKIP LOCKED
),
events AS (DELETE FROM tenure_events e USING doomed WHERE e.job_id = doomed.id RETURNING 1),
stages AS (DELETE FROM tenure_stages s USING doomed WHERE s.job_id = doomed.id RETURNING 1),
effects AS (DELETE FROM tenure_effects f USING doomed WHERE f.job_id = doomed.id RETURNING 1),
jobs AS (DELETE FROM tenure_jobs j USING doomed WHERE j.id = doomed.id RETURNING 1)
SELECT COALESCE((SELECT max(seq) FROM scanned), %(after)s) AS last_seq,
       (SELECT count(*) FROM scanned) AS scanned,
       COALESCE((SELECT min(created_at) FROM scanned)
                >= (SELECT now FROM clock) - make_interval(secs => %(older_than)s), false)
           AS reached_new,
       (SELECT count(*) FROM jobs) AS jobs,
       (SELECT count(*) FROM stages) AS stages,
       (SELECT count(*) FROM effects) AS effects,
       (SELECT count(*) FROM events) AS events,
       (SELECT count(*) FROM scanned, clock
        WHERE scanned.state IN ('succeeded', 'failed', 'cancelled')
          AND scanned.idempotency_key IS NOT NULL
          AND scanned.updated_at < clock.now - make_interval(secs => %(older_than)s)
          AND scanned.updated_at >= clock.now - make_interval(secs => %(keep_keys)s))
           AS kept_for_keys;

-- Fair scheduling: a claim under concurrency limits runs in one transaction that holds this
-- lock, so that the running counts it reads (a statement after the lock, a fresh snapshot)
-- include every claim committed before it.

-- name: limited_claim__lock
SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':tenure:limits')) AS locked;

-- name: tenant_limits
SELECT name, max_running FROM tenure_limits WHERE scope = 'tenant' ORDER BY name;

-- name: set_tenant_limit
INSERT INTO tenure_limits (scope, name, max_running) VALUES ('tenant', %(name)s, %(n)s)
ON CONFLICT (scope, name) DO UPDATE SET max_running = excluded.max_running
RETURNING name;

-- name: set_tenant_limit__clear
DELETE FROM tenure_limits WHERE scope = 'tenant' AND name = %(name)s RETURNING name;

-- name: limited_claim__running
SELECT tenant, kind, count(*) AS running FROM tenure_jobs
WHERE state = 'running' AND lease_until > clock_timestamp()
GROUP BY tenant, kind;

-- name: limited_claim__window
-- The next claimable jobs in claim order, leaving out tenants and kinds already at their limit
-- (the caller picks among them within the remaining room).
SELECT id::text AS id, tenant, kind FROM (
    (SELECT id, tenant, kind, priority, seq FROM tenure_jobs
     WHERE state = 'running' AND lease_until <= clock_timestamp() AND attempt < max_attempts
       AND (%(kinds)s::text[] IS NULL OR kind = ANY (%(kinds)s::text[]))
       AND (NOT (kind = ANY (%(pinned_kinds)s::text[]))
            OR kind || '@' || COALESCE(variant, 'stable') = ANY (%(pinned)s::text[]))
       AND NOT (tenant = ANY (%(full_tenants)s::text[]))
       AND NOT (kind = ANY (%(full_kinds)s::text[]))
     ORDER BY lease_until LIMIT %(window)s)
    UNION ALL
    (SELECT id, tenant, kind, priority, seq FROM tenure_jobs
     WHERE state = 'queued' AND run_after <= clock_timestamp()
       AND (%(kinds)s::text[] IS NULL OR kind = ANY (%(kinds)s::text[]))
       AND (NOT (kind = ANY (%(pinned_kinds)s::text[]))
            OR kind || '@' || COALESCE(variant, 'stable') = ANY (%(pinned)s::text[]))
       AND NOT (tenant = ANY (%(full_tenants)s::text[]))
       AND NOT (kind = ANY (%(full_kinds)s::text[]))
     ORDER BY priority DESC, seq LIMIT %(window)s)
    UNION ALL
    (SELECT id, tenant, kind, priority, seq FROM tenure_jobs
     WHERE state = 'waiting' AND run_after <= clock_timestamp()
       AND (%(kinds)s::text[] IS NULL OR kind = ANY (%(kinds)s::text[]))
       AND (NOT (kind = ANY (%(pinned_kinds)s::text[]))
            OR kind || '@' || COALESCE(variant, 'stable') = ANY (%(pinned)s::text[]))
       AND NOT (tenant = ANY (%(full_tenants)s::text[]))
       AND NOT (kind = ANY (%(full_kinds)s::text[]))
     ORDER BY run_after LIMIT %(window)s)
) AS claimable
ORDER BY priority DESC, seq;

-- Runs that wait (see storage.waits). A signal, a wait and a child's end meet on the job's row
-- lock, so a wake-up is never lost between a check and a suspend.

-- name: signal
-- Stored once per job and name (the first wins). The job's row is updated whatever it is doing
-- (locking it), and woken if it waits for this name.
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
target AS (
    UPDATE tenure_jobs j
    SET run_after = CASE WHEN j.state = 'waiting' AND j.wait ->> 'for' = 'signal'
                              AND j.wait ->> 'name' = %(name)s
                         THEN clock.now ELSE j.run_after END
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
-- guard: lease
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
-- guard: lease
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
-- guard: lease
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

-- Rollouts (see ledger.rollouts): one row per kind; the breaker trips in one conditional write.

-- name: start_rollout
INSERT INTO tenure_rollouts (kind, variant, tenants, percent, max_failure_rate, max_cost_ratio,
                             min_jobs, on_trip, state, started_at)
VALUES (%(kind)s, %(variant)s, %(tenants)s::jsonb, %(percent)s, %(max_failure_rate)s,
        %(max_cost_ratio)s, %(min_jobs)s, %(on_trip)s, 'active', clock_timestamp())
ON CONFLICT (kind) DO NOTHING
RETURNING kind;

-- name: rollouts
SELECT kind, variant, tenants, percent, max_failure_rate, max_cost_ratio, min_jobs, on_trip,
       state, started_at, tripped_at, trip
FROM tenure_rollouts ORDER BY kind;

-- name: stop_rollout
DELETE FROM tenure_rollouts WHERE kind = %(kind)s RETURNING kind;

-- name: trip_rollout
UPDATE tenure_rollouts SET state = 'tripped', tripped_at = clock_timestamp(),
                           trip = %(trip)s::jsonb
WHERE kind = %(kind)s AND state = 'active'
RETURNING kind;

-- name: report_cost
INSERT INTO tenure_costs (job_id, attempt, tokens, usd, at)
VALUES (%(job_id)s::uuid, %(attempt)s, %(tokens)s, %(usd)s, clock_timestamp());

-- name: job_cost
-- What the attempts of one job reported they spent (no row: no such job).
SELECT (SELECT COALESCE(sum(c.tokens), 0) FROM tenure_costs c WHERE c.job_id = j.id) AS tokens,
       (SELECT COALESCE(sum(c.usd), 0) FROM tenure_costs c WHERE c.job_id = j.id) AS usd
FROM tenure_jobs j WHERE j.id = %(job_id)s::uuid;

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
WHERE j.kind = %(kind)s
  AND j.created_at >= (SELECT r.started_at FROM tenure_rollouts r WHERE r.kind = %(kind)s)
  AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s);

-- Evidence (see storage.sql_evidence): references written with the lease, the retrieval
-- cache per tenant, the class versions apps declare.

-- name: record_evidence
-- guard: lease
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
