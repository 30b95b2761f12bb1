-- The SQLite store's named queries for retention: purge (conventions: jobs.sql).

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

-- name: purge_batch__scan
-- The next `scan` jobs in submission order (rowid) for one bounded purge step.
-- `parent_open`: a child whose parent has not ended, kept (the parent may still wait for it),
-- or a job of a budgeted run with a job below it not ended (they spend from their chain's
-- budgets, which goes through it: migration 0021).
SELECT j.rowid AS seq, j.id, j.state, j.updated_at, j.created_at, j.idempotency_key,
       ((j.parent_id IS NOT NULL AND NOT NOT EXISTS (SELECT 1 FROM tenure_jobs p WHERE p.id = j.parent_id
                      AND p.state NOT IN ('succeeded', 'failed', 'cancelled')))
        OR (j.budgeted IS TRUE AND EXISTS (
            WITH RECURSIVE below AS (
                SELECT c.id, c.state, 0 AS depth FROM tenure_jobs c WHERE c.parent_id = j.id
                UNION ALL
                SELECT c.id, c.state, below.depth + 1 FROM tenure_jobs c
                JOIN below ON c.parent_id = below.id WHERE below.depth < 1000
            )
            SELECT 1 FROM below WHERE below.state NOT IN ('succeeded', 'failed', 'cancelled'))))
           AS parent_open
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
