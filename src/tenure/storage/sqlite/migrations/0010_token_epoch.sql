-- tenure schema, version 10 (SQLite): unchanged. PostgreSQL's version 10 puts the WAL timeline
-- in the fencing token's high bits, so that a promoted standby never hands out a token again.
-- A SQLite database is one file on one machine: there is no standby to promote and no
-- replication to lose a commit, so its tokens simply count up.
SELECT 1;
