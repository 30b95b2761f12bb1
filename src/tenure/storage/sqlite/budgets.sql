-- The SQLite store's named queries for spend budgets (see the PostgreSQL file; BEGIN
-- IMMEDIATE serialises the charges).

-- name: submit__budget
INSERT INTO tenure_budgets (job_id, budget, spent) VALUES (:job_id, :budget, '{}');

-- name: budget
WITH RECURSIVE chain AS (
    SELECT id, parent_id, 0 AS depth FROM tenure_jobs WHERE id = :job_id
    UNION ALL
    SELECT j.id, j.parent_id, chain.depth + 1 FROM tenure_jobs j
    JOIN chain ON j.id = chain.parent_id WHERE chain.depth < 1000
)
SELECT b.job_id, b.budget, b.spent FROM tenure_budgets b JOIN chain ON chain.id = b.job_id;

-- name: report_cost__chain
WITH RECURSIVE chain AS (
    SELECT id, parent_id, 0 AS depth FROM tenure_jobs WHERE id = :job_id
    UNION ALL
    SELECT j.id, j.parent_id, chain.depth + 1 FROM tenure_jobs j
    JOIN chain ON j.id = chain.parent_id WHERE chain.depth < 1000
)
SELECT b.job_id, b.budget, b.spent FROM tenure_budgets b
WHERE b.job_id IN (SELECT id FROM chain)
ORDER BY b.job_id;

-- name: report_cost__charge
UPDATE tenure_budgets SET spent = json_extract(:spent, '$."' || job_id || '"')
WHERE job_id IN (SELECT value FROM json_each(:job_ids));

-- name: raise_budget__root
WITH RECURSIVE up AS (
    SELECT id, parent_id, 0 AS depth FROM tenure_jobs WHERE id = :job_id
    UNION ALL
    SELECT j.id, j.parent_id, up.depth + 1 FROM tenure_jobs j
    JOIN up ON j.id = up.parent_id WHERE up.depth < 1000
)
SELECT id FROM up ORDER BY depth DESC LIMIT 1;

-- name: raise_budget__rows
WITH RECURSIVE tree AS (
    SELECT id, 0 AS depth FROM tenure_jobs WHERE id = :root
    UNION ALL
    SELECT c.id, tree.depth + 1 FROM tenure_jobs c
    JOIN tree ON c.parent_id = tree.id WHERE tree.depth < 1000
)
SELECT b.job_id, b.budget, b.spent FROM tenure_budgets b
WHERE b.job_id IN (SELECT id FROM tree) ORDER BY b.job_id;

-- name: raise_budget
UPDATE tenure_budgets SET budget = json_extract(:budgets, '$."' || job_id || '"')
WHERE job_id IN (SELECT value FROM json_each(:job_ids));

-- name: raise_budget__release
WITH RECURSIVE tree AS (
    SELECT id, 0 AS depth FROM tenure_jobs WHERE id = :root
    UNION ALL
    SELECT c.id, tree.depth + 1 FROM tenure_jobs c
    JOIN tree ON c.parent_id = tree.id WHERE tree.depth < 1000
)
UPDATE tenure_jobs SET run_after = :now, updated_at = :now
WHERE id IN (SELECT id FROM tree) AND state = 'queued' AND run_after > :now + :past
RETURNING id;
