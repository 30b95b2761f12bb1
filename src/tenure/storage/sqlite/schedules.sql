-- The SQLite store's named queries for schedules (conventions: jobs.sql; see the PostgreSQL
-- file for what each does).

-- name: schedules
SELECT kind, description, paused, through, next_slot, last_fired_at, last_slot, fired, missed,
       triggered_at
FROM tenure_schedules ORDER BY kind;

-- name: schedule_declare
INSERT INTO tenure_schedules (kind, description, next_slot, updated_at)
VALUES (:kind, :description, :next_slot, :now)
ON CONFLICT (kind) DO UPDATE
SET description = excluded.description, next_slot = excluded.next_slot, updated_at = :now;

-- name: schedule_advance
UPDATE tenure_schedules
SET through = :through, next_slot = :next_slot, fired = fired + :fired, missed = missed + :missed,
    last_slot = COALESCE(:last_slot, last_slot),
    last_fired_at = CASE WHEN :fired > 0 THEN :now ELSE last_fired_at END, updated_at = :now
WHERE kind = :kind
  -- Epoch seconds read back through a datetime may differ in the last bits: within 1 µs.
  AND (through IS NULL AND :was IS NULL OR abs(through - :was) < 0.000001)
  AND (through IS NULL OR through < :through)
RETURNING kind;

-- name: schedule_pause
UPDATE tenure_schedules SET paused = :paused, updated_at = :now WHERE kind = :kind
RETURNING kind;

-- name: schedule_trigger
UPDATE tenure_schedules SET triggered_at = :now, updated_at = :now WHERE kind = :kind
RETURNING kind;

-- name: schedule_clear_trigger
UPDATE tenure_schedules SET triggered_at = NULL
WHERE kind = :kind AND abs(triggered_at - :seen) < 0.000001;
