-- tenure schema, version 21 (SQLite): a job knows whether its run is budgeted. `budgeted` is 1
-- when the job or one of its ancestors has a row in tenure_budgets; it is set once, when the
-- job is written (a submit with a budget, or a spawn under a budgeted job), and returned with
-- every claim. A job that is not budgeted starts, spawns and reports its cost without reading
-- its chain; a budgeted one reads it (tenure.budgets).
ALTER TABLE tenure_jobs ADD COLUMN budgeted INTEGER NOT NULL DEFAULT 0;

-- The statements of this version set the flag themselves. The triggers set it for rows an
-- older version writes during a rolling upgrade (a child it spawns under a budgeted job, a
-- budget it submits); for rows this version writes they find the flag set and do nothing.
CREATE TRIGGER tenure_jobs_child_budgeted AFTER INSERT ON tenure_jobs
FOR EACH ROW WHEN NEW.parent_id IS NOT NULL AND NOT NEW.budgeted
BEGIN
    UPDATE tenure_jobs SET budgeted = 1
    WHERE id = NEW.id AND EXISTS (SELECT 1 FROM tenure_jobs p WHERE p.id = NEW.parent_id AND p.budgeted);
END;
CREATE TRIGGER tenure_budgets_mark_job AFTER INSERT ON tenure_budgets
FOR EACH ROW
BEGIN
    UPDATE tenure_jobs SET budgeted = 1 WHERE id = NEW.job_id AND NOT budgeted;
END;

-- The runs budgeted before this version: the budgeted rows' trees only.
WITH RECURSIVE tree(id, depth) AS (
    SELECT job_id, 0 FROM tenure_budgets
    UNION
    SELECT c.id, tree.depth + 1 FROM tenure_jobs c
    JOIN tree ON c.parent_id = tree.id WHERE tree.depth < 1000
)
UPDATE tenure_jobs SET budgeted = 1 WHERE id IN (SELECT id FROM tree);
