-- The PostgreSQL store's named queries for the fence receiver (FenceGuard) (conventions: jobs.sql).

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
SELECT highest, holder FROM tenure_fence_scopes WHERE scope = %(scope)s FOR UPDATE;

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
-- The holder changes with a higher token, and is bound where the highest had none.
UPDATE tenure_fence_scopes
SET highest = GREATEST(highest, %(fence)s), updated_at = clock_timestamp(),
    holder = CASE WHEN %(fence)s > highest THEN %(holder)s::text
                  WHEN %(fence)s = highest THEN COALESCE(holder, %(holder)s::text)
                  ELSE holder END
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
