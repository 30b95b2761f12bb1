-- tenure schema, version 13 (SQLite): no schema change. PostgreSQL's version 13 floors the
-- fencing token at the database clock in microseconds; SQLite's claim and cancel do the same
-- from the `:now` their transaction reads (leases.sql), so a file restored from a copy never
-- hands out a token again.
SELECT 1;
