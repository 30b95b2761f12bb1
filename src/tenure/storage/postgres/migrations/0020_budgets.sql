-- tenure schema, version 20 (PostgreSQL): spend budgets of runs (tenure.budgets). A budgeted job's
-- ceiling per unit (the app's units: usd, calls, tokens) and what it and its descendants
-- spent, charged by `ctx.report_cost` to every budgeted job of the chain in one transaction.
-- Every unit a handler reports is kept with its attempt's cost row too (`units`).
CREATE TABLE tenure_budgets (
    job_id uuid PRIMARY KEY REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    budget jsonb NOT NULL,
    spent  jsonb NOT NULL DEFAULT '{}'
);
ALTER TABLE tenure_costs ADD COLUMN units jsonb;
