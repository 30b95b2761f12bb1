-- The PostgreSQL store's named queries for spend budgets (tenure.budgets; conventions:
-- jobs.sql). A run's chain is the job and its ancestors (by parent_id); the budgeted ones have
-- a row in tenure_budgets: the job's ceiling and what it and its descendants spent.

-- name: budget
-- The chain's budgeted rows, without locks (a start's or a spawn's look).
WITH RECURSIVE chain AS (
    SELECT id, parent_id, 0 AS depth FROM tenure_jobs WHERE id = %(job_id)s::uuid
    UNION ALL
    SELECT j.id, j.parent_id, chain.depth + 1 FROM tenure_jobs j
    JOIN chain ON j.id = chain.parent_id WHERE chain.depth < 1000
)
SELECT b.job_id::text AS job_id, b.budget, b.spent FROM tenure_budgets b
JOIN chain ON chain.id = b.job_id;

-- name: report_cost__chain
-- The same rows, locked in the order of their ids: parallel children charging one parent
-- take its lock one after the other, and never in opposite orders.
WITH RECURSIVE chain AS (
    SELECT id, parent_id, 0 AS depth FROM tenure_jobs WHERE id = %(job_id)s::uuid
    UNION ALL
    SELECT j.id, j.parent_id, chain.depth + 1 FROM tenure_jobs j
    JOIN chain ON j.id = chain.parent_id WHERE chain.depth < 1000
)
SELECT b.job_id::text AS job_id, b.budget, b.spent FROM tenure_budgets b
WHERE b.job_id IN (SELECT id FROM chain)
ORDER BY b.job_id
FOR UPDATE OF b;

-- name: report_cost__charge
-- `spent` maps each charged job id to what it has now spent.
UPDATE tenure_budgets b SET spent = %(spent)s::jsonb -> b.job_id::text
WHERE b.job_id = ANY (%(job_ids)s::uuid[]);

-- name: raise_budget__root
-- The run's root: the job's highest ancestor. The job's row is locked (KEY SHARE, for the
-- raise's event) before any budget row: a purge that locked it first (FOR UPDATE, then its
-- budget rows by the cascade) is waited for, and one that comes after skips it; taken after
-- the budget rows, the two could deadlock.
WITH RECURSIVE named AS MATERIALIZED (
    SELECT id, parent_id FROM tenure_jobs WHERE id = %(job_id)s::uuid FOR KEY SHARE
),
up AS (
    SELECT id, parent_id, 0 AS depth FROM named
    UNION ALL
    SELECT j.id, j.parent_id, up.depth + 1 FROM tenure_jobs j
    JOIN up ON j.id = up.parent_id WHERE up.depth < 1000
)
SELECT id::text AS id FROM up ORDER BY depth DESC LIMIT 1;

-- name: raise_budget__rows
-- Every budgeted row of the run, locked in id order (as a charge locks its chain's).
WITH RECURSIVE tree AS (
    SELECT id, 0 AS depth FROM tenure_jobs WHERE id = %(root)s::uuid
    UNION ALL
    SELECT c.id, tree.depth + 1 FROM tenure_jobs c
    JOIN tree ON c.parent_id = tree.id WHERE tree.depth < 1000
)
SELECT b.job_id::text AS job_id, b.budget, b.spent FROM tenure_budgets b
WHERE b.job_id IN (SELECT id FROM tree)
ORDER BY b.job_id
FOR UPDATE OF b;

-- name: raise_budget
-- `budgets` maps each raised job id to its new ceilings.
UPDATE tenure_budgets b SET budget = %(budgets)s::jsonb -> b.job_id::text
WHERE b.job_id = ANY (%(job_ids)s::uuid[]);

-- name: raise_budget__release
-- The run's jobs held for the budget (queued, due past a century) are due now.
WITH RECURSIVE tree AS (
    SELECT id, 0 AS depth FROM tenure_jobs WHERE id = %(root)s::uuid
    UNION ALL
    SELECT c.id, tree.depth + 1 FROM tenure_jobs c
    JOIN tree ON c.parent_id = tree.id WHERE tree.depth < 1000
),
clock AS MATERIALIZED (SELECT clock_timestamp() AS now)
UPDATE tenure_jobs j SET run_after = clock.now, updated_at = clock.now
FROM tree, clock
WHERE j.id = tree.id AND j.state = 'queued'
  AND j.run_after > clock.now + make_interval(secs => %(past)s::float8)
RETURNING j.id::text AS id, pg_notify('tenure_jobs:' || current_schema(), j.kind) AS told;
