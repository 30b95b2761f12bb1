-- tenure schema, version 11 (PostgreSQL): a receiver's idempotency keys are per scope. Before,
-- scope B sending scope A's key got A's stored result.
ALTER TABLE tenure_fence_results DROP CONSTRAINT tenure_fence_results_pkey;
ALTER TABLE tenure_fence_results ADD PRIMARY KEY (scope, key);
DROP INDEX IF EXISTS tenure_fence_results_scope;
CREATE INDEX tenure_fence_results_key ON tenure_fence_results (key);
