-- tenure schema, version 13 (PostgreSQL): tokens never repeat, whatever happens to the
-- database's history (invariant 16). Version 10 floored tokens at the WAL timeline; that holds
-- only where the new primary saw the old one's history: a base backup or snapshot started as it
-- is stays on the old timeline, and a promotion or restore without the newer history file picks
-- a timeline again. The floor is now the database clock in microseconds since 1970: a claim or
-- cancel sets GREATEST(token + 1, floor + 1), so a token handed out before a failover or restore
-- is below every token handed out after it, as long as the servers' clocks move forward and
-- agree within the time the failover or restore takes (NTP does far better than that). Tokens
-- stay below 2^53 (a JSON number in every language) until the year 2255.
CREATE OR REPLACE FUNCTION tenure_token_floor() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT floor(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint
$$;
