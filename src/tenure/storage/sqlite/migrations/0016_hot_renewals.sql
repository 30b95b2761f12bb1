-- tenure schema, version 16 (SQLite): nothing changes. PostgreSQL's version 16 keeps lease ends
-- out of its indexes so that a renewal writes no index entry and leaves no dead version behind;
-- SQLite updates a row in place and has no dead versions to keep, so its index on lease ends
-- stays and answers the claim's search for expired leases.
SELECT 1;
