-- tenure schema, version 21 (PostgreSQL): a job knows whether its run is budgeted. `budgeted` is
-- true when the job or one of its ancestors has a row in tenure_budgets; it is set once, when
-- the job is written (a submit with a budget, or a spawn under a budgeted job), and returned
-- with every claim. A job that is not budgeted starts, spawns and reports its cost without
-- reading its chain; a budgeted one reads it (tenure.budgets).
-- A nullable column without a default is added without rewriting the table; the rows before
-- it read NULL, which every reader takes as false (`IS NOT TRUE`), save those marked below.
ALTER TABLE tenure_jobs ADD COLUMN budgeted boolean;

-- This version's statements write the flag, true or false. A row an older version writes
-- during a rolling upgrade names no flag (NULL): the trigger sets it from the parent's, and a
-- budget an older version submits marks its job, so that no job of a budgeted run goes
-- unchecked or uncharged. For a row this version writes the first does not fire and the
-- second changes nothing. The functions keep the search_path of this migration: they read
-- this schema's tables from any session.
CREATE OR REPLACE FUNCTION tenure_child_budgeted() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    NEW.budgeted := EXISTS (SELECT 1 FROM tenure_jobs p WHERE p.id = NEW.parent_id AND p.budgeted);
    RETURN NEW;
END
$$;
CREATE TRIGGER tenure_jobs_child_budgeted BEFORE INSERT ON tenure_jobs
FOR EACH ROW WHEN (NEW.budgeted IS NULL)
EXECUTE FUNCTION tenure_child_budgeted();

CREATE OR REPLACE FUNCTION tenure_budget_marks_job() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE tenure_jobs SET budgeted = true WHERE id = NEW.job_id AND budgeted IS NOT TRUE;
    RETURN NULL;
END
$$;
CREATE TRIGGER tenure_budgets_mark_job AFTER INSERT ON tenure_budgets
FOR EACH ROW EXECUTE FUNCTION tenure_budget_marks_job();

-- The runs budgeted before this version: the budgeted rows' trees only.
WITH RECURSIVE tree AS (
    SELECT job_id AS id, 0 AS depth FROM tenure_budgets
    UNION
    SELECT c.id, tree.depth + 1 FROM tenure_jobs c
    JOIN tree ON c.parent_id = tree.id WHERE tree.depth < 1000
)
UPDATE tenure_jobs j SET budgeted = true FROM (SELECT DISTINCT id FROM tree) AS t WHERE j.id = t.id;
