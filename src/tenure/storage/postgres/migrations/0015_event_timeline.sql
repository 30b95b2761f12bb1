-- tenure schema, version 15 (PostgreSQL): each event records the WAL timeline it was written
-- on, so that a job's timeline can draw a failover (a promotion starts a new timeline) between
-- two of its events. Adding the column with no default is instant; the default then applies to
-- new rows only (a volatile default in ADD COLUMN would rewrite the table). Older rows: NULL.
-- pg_walfile_name() names the WAL file by the timeline WAL is inserted on now: its first eight
-- hex digits are that timeline's ID (as tenure_token_floor did in version 10). The expression
-- is the default itself, not a function of ours: nothing to inline, nothing to grant.
ALTER TABLE tenure_events ADD COLUMN timeline integer;
ALTER TABLE tenure_events ALTER COLUMN timeline
    SET DEFAULT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::integer;
