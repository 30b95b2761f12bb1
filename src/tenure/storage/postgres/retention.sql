-- The PostgreSQL store's named queries for retention: purge (conventions: jobs.sql).

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
                      AND p.state NOT IN ('succeeded', 'failed', 'cancelled')))
  -- A job of a budgeted run is kept while a job below it has not ended: they spend from the
  -- budgets of their chain, which goes through it (migration 0021).
  AND (j.budgeted IS NOT TRUE OR NOT EXISTS (
          WITH RECURSIVE below AS (
              SELECT c.id, c.state, 0 AS depth FROM tenure_jobs c WHERE c.parent_id = j.id
              UNION ALL
              SELECT c.id, c.state, below.depth + 1 FROM tenure_jobs c
              JOIN below ON c.parent_id = below.id WHERE below.depth < 1000
          )
          SELECT 1 FROM below WHERE below.state NOT IN ('succeeded', 'failed', 'cancelled')));

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
      -- A job of a budgeted run is kept while a job below it has not ended: they spend from
      -- the budgets of their chain, which goes through it (migration 0021).
      AND (j.budgeted IS NOT TRUE OR NOT EXISTS (
              WITH RECURSIVE below AS (
                  SELECT c.id, c.state, 0 AS depth FROM tenure_jobs c WHERE c.parent_id = j.id
                  UNION ALL
                  SELECT c.id, c.state, below.depth + 1 FROM tenure_jobs c
                  JOIN below ON c.parent_id = below.id WHERE below.depth < 1000
              )
              SELECT 1 FROM below WHERE below.state NOT IN ('succeeded', 'failed', 'cancelled')))
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
