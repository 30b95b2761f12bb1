-- tenure schema, version 10 (PostgreSQL): fencing tokens survive failover (invariant 16).
-- A promoted standby may lack the old primary's last commits, among them claims whose tokens
-- were already handed to workers. Every promotion (and every point-in-time recovery) starts a
-- new WAL timeline whose ID is above the one it branched from, so a token granted on timeline
-- T is at least (T - 1) * 2^32 + 1, and one granted on an older timeline is below that as long
-- as no job is claimed or cancelled 2^32 times on one timeline. On timeline 1 the floor is 0:
-- a server that never failed over hands out 1, 2, 3 … as before.
-- pg_walfile_name() names the WAL file by the timeline WAL is inserted on now; its first eight
-- hex digits are that timeline's ID. It runs on a primary only, where tokens are granted.
CREATE OR REPLACE FUNCTION tenure_token_floor() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT (('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint - 1) << 32
$$;
