-- tenure schema, version 16 (PostgreSQL): a renewal is a HOT update.
-- An update is HOT (heap-only: no new index entries, its old version pruned from the page
-- without a vacuum) when it changes no indexed column, predicates of partial indexes included,
-- and the new version fits on the same page. A renewal changes lease_until and heartbeat_at;
-- until this version lease_until was the key of tenure_jobs_running_lease, so every renewal
-- wrote a new entry into every index of the table (0 of 724,880 updates were HOT in
-- bench/fleet.py). Running rows are now found on an index keyed by what a renewal leaves alone;
-- the claim filters their lease ends (running rows are at most the fleet's handler slots).
-- fillfactor 70 leaves 30% of each new page free for the next versions of its rows: a worker
-- renews its leases in one statement, and each of them needs room on its own page at once
-- (docs/explanation/storage.md: HOT share of renewals measured at fillfactor 100, 90, 80, 70, 50).
-- The index build holds writes to tenure_jobs for its scan of the table: about a second per
-- million rows on the benchmark's machine; `tenure purge` first keeps it short.
ALTER TABLE tenure_jobs SET (fillfactor = 70);
CREATE INDEX tenure_jobs_running ON tenure_jobs (kind, tenant) WHERE state = 'running';
DROP INDEX tenure_jobs_running_lease;
