-- The fence receiver, version 14 (SQLite): a receiver never accepts two holders of one token
-- (invariant 17); see PostgreSQL's version 14.
ALTER TABLE tenure_fence_scopes ADD COLUMN holder TEXT;
