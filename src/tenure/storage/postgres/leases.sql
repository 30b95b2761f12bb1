-- The PostgreSQL store's named queries for leases: claim and publish (one exchange), renew, fail, release, cancel, requeue, and the fair claim (conventions: jobs.sql).

-- name: exchange
-- guard: lease (model: complete)
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
-- Expired leases are looked for only in a rescue claim (ClaimRequest.rescue): the search reads
-- every running row of the kinds (no index has lease ends: a renewal is a HOT update, schema
-- version 16), and while the MVCC horizon is held, every dead version of one too. A fleet's
-- workers take turns (rescue_shared, schema version 22): a rescue with a turn searches only
-- if it takes its claimers' row, due and not locked by another claim, or if that row is
-- missing. `searching` false is a one-time filter: the scans are not run at all.
rescue_turn AS MATERIALIZED (
    SELECT t.claimer FROM tenure_rescue_turns t
    -- A claim with no room (a limited claim whose kinds are full) could take nothing: it
    -- leaves the turn to one that can.
    WHERE %(rescue)s AND %(limit)s > 0 AND t.claimer = %(rescue_turn)s::text
      -- A turn set further ahead than a turn lasts came from a clock ahead of this one (a
      -- failover to a server whose clock is behind): it is due now, not when that clock says.
      AND (t.due_at <= (SELECT now FROM clock)
           OR t.due_at > (SELECT now FROM clock) + make_interval(secs => 2 * %(rescue_every)s))
    FOR UPDATE OF t SKIP LOCKED
),
searching AS MATERIALIZED (
    SELECT %(rescue)s AND (
        %(rescue_turn)s::text IS NULL
        OR EXISTS (SELECT 1 FROM rescue_turn)
        OR NOT EXISTS (SELECT 1 FROM tenure_rescue_turns t WHERE t.claimer = %(rescue_turn)s::text)
    ) AS yes
),
-- Where the queue is read from: the claimer's floor (or position), or the head when this
-- claim searches for expired leases. The searches take turns: so does the reading of the head,
-- where every job claimed while a transaction holds the horizon leaves a dead version.
from_floor AS MATERIALIZED (
    SELECT CASE WHEN (SELECT yes FROM searching) THEN 0 ELSE %(seq_from)s::bigint END AS from_seq
),
exhausted AS (
    SELECT j.id, j.lease_until AS was_lease_until FROM tenure_jobs j, clock
    WHERE (SELECT yes FROM searching) AND j.state = 'running'
      AND j.lease_until <= (SELECT now FROM clock)
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
              exhausted.was_lease_until, j.heartbeat_at AS was_heartbeat,
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
           j.lease_until AS was_lease_until, j.heartbeat_at AS was_heartbeat, j.priority, j.seq
    FROM tenure_jobs j, clock
    WHERE (SELECT yes FROM searching) AND j.state = 'running'
      AND j.lease_until <= (SELECT now FROM clock)
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
           NULL::timestamptz AS was_lease_until,
           NULL::timestamptz AS was_heartbeat, j.priority, j.seq
    FROM tenure_jobs j, clock
    WHERE j.state = 'queued' AND j.run_after <= clock.now
      -- The claimer's floor: the index skips what is below it, dead versions of claimed jobs
      -- included; a rescue that searches starts at the head (claims.py, `from_floor`).
      -- storage/postgres/claims.py rewrites the next line (removed in the claim from the
      -- head, split into three ranges in the claim from a position): keep its text.
      AND j.seq >= (SELECT from_seq FROM from_floor)
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
           NULL::timestamptz AS was_lease_until,
           NULL::timestamptz AS was_heartbeat, j.priority, j.seq
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
    SELECT id, was_state, was_owner, was_token, was_lease_until, was_heartbeat FROM (
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
        -- Invariant 16: above every token handed out before, even one a lost history
        -- forgot: the floor is the database clock in microseconds (migration 0013).
        fencing_token = GREATEST(j.fencing_token + 1, clock.token_floor + 1),
        attempt = j.attempt + 1, updated_at = clock.now
    FROM candidate, clock
    WHERE j.id = candidate.id
    RETURNING j.id, j.kind, j.tenant, j.fencing_token, j.attempt, j.max_attempts, j.payload,
              j.step, j.checkpoint, j.lease_until, j.priority, j.seq, j.wait, j.variant,
              j.labels, j.traceparent, j.principal, j.budgeted, clock.now AS claimed_at,
              candidate.was_state,
              candidate.was_owner, candidate.was_token, candidate.was_lease_until,
              candidate.was_heartbeat
),
-- The turn taken: the next one a turn later, or at once if this search found an expired lease,
-- taken over, failed, or left for lack of room, or came back full with a queued job that the
-- claimer's floor (or its position's range) skips (there may be more: every worker's next
-- rescue searches until none is left).
rescue_next AS (
    UPDATE tenure_rescue_turns t
    SET due_at = CASE WHEN EXISTS (SELECT 1 FROM expired_candidate)
                        OR EXISTS (SELECT 1 FROM expired_out)
                        OR ((SELECT count(*) FROM claimed) >= %(limit)s
                            AND EXISTS (SELECT 1 FROM claimed c
                                        WHERE c.was_state = 'queued'
                                          AND c.seq < %(seq_from)s::bigint
                                          AND (%(floor_priority)s::int IS NULL
                                               OR c.priority = %(floor_priority)s::int)))
                      THEN clock.now
                      ELSE clock.now + make_interval(secs => %(rescue_every)s) END
    FROM rescue_turn, clock
    WHERE t.claimer = rescue_turn.claimer
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT job_id, type, at, token, owner_id, detail FROM (
        SELECT e.id AS job_id, 'lease_expired' AS type, e.at, e.fencing_token AS token,
               e.owner_id,
               jsonb_build_object('attempt', e.attempt, 'then', 'failed',
                                  'lease_until', e.was_lease_until,
                                  'heartbeat_at', e.was_heartbeat) AS detail,
               1 AS ord
        FROM expired_out e
        UNION ALL
        SELECT e.id, 'job_failed', e.at, e.fencing_token, e.owner_id,
               jsonb_build_object('code', 'lease_expired', 'attempt', e.attempt), 2
        FROM expired_out e
        UNION ALL
        SELECT c.id, 'lease_expired', c.claimed_at, c.was_token, c.was_owner,
               jsonb_build_object('attempt', c.attempt - 1, 'then', 'reclaimed',
                                  'lease_until', c.was_lease_until,
                                  'heartbeat_at', c.was_heartbeat), 3
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
       variant, labels, traceparent, principal, budgeted, was_token, was_state
FROM claimed
UNION ALL
SELECT 'completed', id::text, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM done
ORDER BY outcome, priority DESC, seq;

-- name: exchange__rescue_turn
-- The row of a set of claimers' turn, written once before its first shared rescue (schema
-- version 22); due at once.
INSERT INTO tenure_rescue_turns (claimer, due_at) VALUES (%(claimer)s, clock_timestamp())
ON CONFLICT (claimer) DO NOTHING;

-- name: extend_many
-- guard: lease (model: extend)
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

-- name: fail
-- guard: lease (model: fail)
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
        lease_until = NULL, error = %(error)s::jsonb, updated_at = clock.now,
        -- A receiver saw a higher token (or this one from another claim): the next claim is
        -- above it.
        fencing_token = GREATEST(j.fencing_token, %(token_floor)s::bigint)
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
-- guard: lease (model: release)
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
released AS (
    UPDATE tenure_jobs j
    SET state = 'queued', owner_id = NULL, lease_until = NULL, attempt = j.attempt - 1,
        run_after = clock.now + make_interval(secs => %(delay)s::float8), updated_at = clock.now
    FROM clock
    WHERE j.id = %(job_id)s::uuid AND j.state = 'running' AND j.owner_id = %(owner_id)s
      AND j.fencing_token = %(token)s AND j.lease_until > clock.now
    RETURNING j.id, j.kind, clock.now AS at
),
logged AS (
    INSERT INTO tenure_events (job_id, type, at, token, owner_id, detail)
    SELECT id, 'job_released', at, %(token)s, %(owner_id)s, %(detail)s::jsonb FROM released
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

-- Fair scheduling: a claim under concurrency limits runs in one transaction that holds this
-- lock, so that the running counts it reads (a statement after the lock, a fresh snapshot)
-- include every claim committed before it.

-- name: limited_claim__lock
SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':tenure:limits')) AS locked;

-- name: limited_claim__running
SELECT tenant, kind, count(*) AS running FROM tenure_jobs
WHERE state = 'running' AND lease_until > clock_timestamp()
GROUP BY tenant, kind;

-- name: limited_claim__window
-- The next claimable jobs in claim order, leaving out tenants and kinds already at their limit
-- (the caller picks among them within the remaining room).
SELECT id::text AS id, tenant, kind, priority, payload FROM (
    (SELECT id, tenant, kind, priority, seq,
            CASE WHEN kind = ANY (%(keyed_kinds)s::text[]) THEN payload END AS payload
     FROM tenure_jobs
     WHERE state = 'running' AND lease_until <= clock_timestamp() AND attempt < max_attempts
       AND (%(kinds)s::text[] IS NULL OR kind = ANY (%(kinds)s::text[]))
       AND (NOT (kind = ANY (%(pinned_kinds)s::text[]))
            OR kind || '@' || COALESCE(variant, 'stable') = ANY (%(pinned)s::text[]))
       AND NOT (tenant = ANY (%(full_tenants)s::text[]))
       AND NOT (kind = ANY (%(full_kinds)s::text[]))
     ORDER BY lease_until LIMIT %(window)s)
    UNION ALL
    (SELECT id, tenant, kind, priority, seq,
            CASE WHEN kind = ANY (%(keyed_kinds)s::text[]) THEN payload END AS payload
     FROM tenure_jobs
     WHERE state = 'queued' AND run_after <= clock_timestamp()
       AND (%(kinds)s::text[] IS NULL OR kind = ANY (%(kinds)s::text[]))
       AND (NOT (kind = ANY (%(pinned_kinds)s::text[]))
            OR kind || '@' || COALESCE(variant, 'stable') = ANY (%(pinned)s::text[]))
       AND NOT (tenant = ANY (%(full_tenants)s::text[]))
       AND NOT (kind = ANY (%(full_kinds)s::text[]))
     ORDER BY priority DESC, seq LIMIT %(window)s)
    UNION ALL
    (SELECT id, tenant, kind, priority, seq,
            CASE WHEN kind = ANY (%(keyed_kinds)s::text[]) THEN payload END AS payload
     FROM tenure_jobs
     WHERE state = 'waiting' AND run_after <= clock_timestamp()
       AND (%(kinds)s::text[] IS NULL OR kind = ANY (%(kinds)s::text[]))
       AND (NOT (kind = ANY (%(pinned_kinds)s::text[]))
            OR kind || '@' || COALESCE(variant, 'stable') = ANY (%(pinned)s::text[]))
       AND NOT (tenant = ANY (%(full_tenants)s::text[]))
       AND NOT (kind = ANY (%(full_kinds)s::text[]))
     ORDER BY run_after LIMIT %(window)s)
) AS claimable
ORDER BY priority DESC, seq;

-- Rate limits (tenure.rates, storage.limits.RateBook): one row per key, its theoretical
-- arrival time in epoch seconds by this clock; read and written inside the limited claim's
-- serialised transaction.

-- name: limited_claim__clock
SELECT extract(epoch FROM clock_timestamp())::float8 AS now;

-- name: limited_claim__rates
SELECT key, tat, last_tenant FROM tenure_rates WHERE key = ANY (%(keys)s::text[]);

-- name: limited_claim__rates_moved
-- `moved` maps each key to [tat, the tenant it served last].
INSERT INTO tenure_rates (key, tat, last_tenant)
SELECT key, (value ->> 0)::float8, value ->> 1 FROM jsonb_each(%(moved)s::jsonb)
ON CONFLICT (key) DO UPDATE
SET tat = GREATEST(tenure_rates.tat, excluded.tat), last_tenant = excluded.last_tenant;

-- name: hold_rate_key
-- A provider said 429: no claim of the key before now + seconds (a later hold stands).
INSERT INTO tenure_rates (key, tat)
VALUES (%(key)s, extract(epoch FROM clock_timestamp())::float8 + %(seconds)s::float8)
ON CONFLICT (key) DO UPDATE SET tat = GREATEST(tenure_rates.tat, excluded.tat);
