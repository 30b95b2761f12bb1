-- The SQLite store's named queries for rollouts and the cost they report (conventions: jobs.sql).

-- Rollouts (see ledger.rollouts): one row per kind; the breaker trips in one conditional write.

-- name: start_rollout
INSERT INTO tenure_rollouts (kind, variant, tenants, percent, max_failure_rate, max_cost_ratio,
                             min_jobs, on_trip, state, started_at)
VALUES (:kind, :variant, :tenants, :percent, :max_failure_rate, :max_cost_ratio, :min_jobs,
        :on_trip, 'active', :now)
ON CONFLICT (kind) DO NOTHING
RETURNING kind;

-- name: rollouts
SELECT kind, variant, tenants, percent, max_failure_rate, max_cost_ratio, min_jobs, on_trip,
       state, started_at, tripped_at, trip
FROM tenure_rollouts ORDER BY kind;

-- name: stop_rollout
DELETE FROM tenure_rollouts WHERE kind = :kind RETURNING kind;

-- name: trip_rollout
UPDATE tenure_rollouts SET state = 'tripped', tripped_at = :now, trip = :trip
WHERE kind = :kind AND state = 'active'
RETURNING kind;

-- name: report_cost
INSERT INTO tenure_costs (job_id, attempt, tokens, usd, units, at)
VALUES (:job_id, :attempt, :tokens, :usd, :units, :now);

-- name: job_cost
-- What the attempts of one job reported they spent (no row: no such job).
SELECT (SELECT COALESCE(sum(c.tokens), 0) FROM tenure_costs c WHERE c.job_id = j.id) AS tokens,
       (SELECT COALESCE(sum(c.usd), 0) FROM tenure_costs c WHERE c.job_id = j.id) AS usd
FROM tenure_jobs j WHERE j.id = :job_id;

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
WHERE j.kind = :kind
  AND j.created_at >= (SELECT r.started_at FROM tenure_rollouts r WHERE r.kind = :kind)
  AND (:tenant IS NULL OR j.tenant = :tenant);
