-- tenure schema, version 21 (SQLite): a job knows whether its run is budgeted. `budgeted` is 1
-- when the job or one of its ancestors has a row in tenure_budgets; it is set once, when the
-- job is written (a submit with a budget, or a spawn under a budgeted job), and returned with
-- every claim. A job that is not budgeted starts, spawns and reports its cost without reading
-- its chain; a budgeted one reads it (tenure.budgets).
-- The rows before it read NULL, which every reader takes as false (`IS NOT TRUE`), save
-- those marked below.
ALTER TABLE tenure_jobs ADD COLUMN budgeted INTEGER;

-- This version's statements write the flag, 1 or 0. A row an older version writes during a
-- rolling upgrade names no flag (NULL): the trigger sets it from the parent's, and a budget
-- an older version submits marks its job, so that no job of a budgeted run goes unchecked or
-- uncharged. For a row this version writes the first does not fire and the second changes
-- nothing.
CREATE TRIGGER tenure_jobs_child_budgeted AFTER INSERT ON tenure_jobs
FOR EACH ROW WHEN NEW.budgeted IS NULL
BEGIN
    UPDATE tenure_jobs
    SET budgeted = EXISTS (SELECT 1 FROM tenure_jobs p WHERE p.id = NEW.parent_id AND p.budgeted)
    WHERE id = NEW.id;
END;
CREATE TRIGGER tenure_budgets_mark_job AFTER INSERT ON tenure_budgets
FOR EACH ROW
BEGIN
    UPDATE tenure_jobs SET budgeted = 1 WHERE id = NEW.job_id AND budgeted IS NOT 1;
END;

-- The runs budgeted before this version: the budgeted rows' trees only.
WITH RECURSIVE tree(id, depth) AS (
    SELECT job_id, 0 FROM tenure_budgets
    UNION
    SELECT c.id, tree.depth + 1 FROM tenure_jobs c
    JOIN tree ON c.parent_id = tree.id WHERE tree.depth < 1000
)
UPDATE tenure_jobs SET budgeted = 1 WHERE id IN (SELECT id FROM tree);
