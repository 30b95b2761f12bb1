-- tenure schema, version 20 (SQLite): spend budgets of runs (tenure.budgets). A budgeted job's
-- ceiling per unit (the app's units: usd, calls, tokens) and what it and its descendants
-- spent, charged by `ctx.report_cost` to every budgeted job of the chain in one transaction.
-- Every unit a handler reports is kept with its attempt's cost row too (`units`).
CREATE TABLE tenure_budgets (
    job_id TEXT PRIMARY KEY REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    budget TEXT NOT NULL,
    spent  TEXT NOT NULL DEFAULT '{}'
);
ALTER TABLE tenure_costs ADD COLUMN units TEXT;
