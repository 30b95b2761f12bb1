-- tenure schema, version 22 (PostgreSQL): the search for expired leases takes turns. A worker's
-- rescue claim (once a second) reads every running row of its kinds, and while a transaction
-- elsewhere holds the MVCC horizon, every dead version of one too; eight workers of the same
-- kinds read them eight times a second. A row here per set of kinds and variants a worker
-- claims (`claimer`, a digest of them) says when that search is next due. A rescue claim
-- searches only if it takes the row (due, and not locked by another claim: SKIP LOCKED) and
-- sets the next turn a second later, or at once when its search took over an expired lease.
-- The row is written once per claimer set, before its first turn (ON CONFLICT DO NOTHING);
-- workers of an earlier version search on their own, as before.
CREATE TABLE tenure_rescue_turns (
    claimer text PRIMARY KEY,
    due_at  timestamptz NOT NULL
);
