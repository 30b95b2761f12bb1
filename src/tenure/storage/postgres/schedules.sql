-- The PostgreSQL store's named queries for schedules (conventions: jobs.sql).

-- name: schedules
SELECT kind, description, paused, through, next_slot, last_fired_at, last_slot, fired, missed,
       triggered_at
FROM tenure_schedules ORDER BY kind;

-- name: schedule_declare
INSERT INTO tenure_schedules (kind, description, next_slot)
VALUES (%(kind)s, %(description)s, %(next_slot)s::timestamptz)
ON CONFLICT (kind) DO UPDATE
SET description = EXCLUDED.description, next_slot = EXCLUDED.next_slot,
    updated_at = clock_timestamp();

-- name: schedule_advance
-- Only forward, only from what this pass read: of two passes over the same slots one writes.
UPDATE tenure_schedules
SET through = %(through)s::timestamptz, next_slot = %(next_slot)s::timestamptz,
    fired = fired + %(fired)s, missed = missed + %(missed)s,
    last_slot = COALESCE(%(last_slot)s::timestamptz, last_slot),
    last_fired_at = CASE WHEN %(fired)s > 0 THEN clock_timestamp() ELSE last_fired_at END,
    updated_at = clock_timestamp()
WHERE kind = %(kind)s AND through IS NOT DISTINCT FROM %(was)s::timestamptz
  AND (through IS NULL OR through < %(through)s::timestamptz)
RETURNING kind;

-- name: schedule_pause
UPDATE tenure_schedules SET paused = %(paused)s, updated_at = clock_timestamp()
WHERE kind = %(kind)s
RETURNING kind;

-- name: schedule_trigger
UPDATE tenure_schedules SET triggered_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE kind = %(kind)s
RETURNING kind;

-- name: schedule_clear_trigger
UPDATE tenure_schedules SET triggered_at = NULL
WHERE kind = %(kind)s AND triggered_at = %(seen)s::timestamptz;
