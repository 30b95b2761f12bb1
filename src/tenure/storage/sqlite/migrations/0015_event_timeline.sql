-- tenure schema, version 15 (SQLite): the events' `timeline` column, as PostgreSQL's version
-- 15. A SQLite file has no failover: the column stays NULL.
ALTER TABLE tenure_events ADD COLUMN timeline INTEGER;
