-- The SQLite store's named queries for the fence receiver (FenceGuard) (conventions: jobs.sql).

-- The fence receiver (FenceGuard): steps of one BEGIN IMMEDIATE transaction.

-- name: fence_highest__lock
INSERT INTO tenure_fence_scopes (scope, highest, updated_at)
VALUES (:scope, 0, :now)
ON CONFLICT (scope) DO NOTHING;

-- name: fence_highest
SELECT highest, holder FROM tenure_fence_scopes WHERE scope = :scope;

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
-- The holder changes with a higher token, and is bound where the highest had none.
UPDATE tenure_fence_scopes
SET highest = MAX(highest, :fence), updated_at = :now,
    holder = CASE WHEN :fence > highest THEN :holder
                  WHEN :fence = highest THEN COALESCE(holder, :holder)
                  ELSE holder END
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
