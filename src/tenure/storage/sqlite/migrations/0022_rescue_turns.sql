-- tenure schema, version 22 (SQLite): the table of the PostgreSQL schema's turns for the
-- search of expired leases, kept for the schemas' parity. SQLite does not use it: its index on
-- lease ends finds an expired lease without stepping over dead versions, so every claim looks.
CREATE TABLE tenure_rescue_turns (
    claimer TEXT PRIMARY KEY,
    due_at  TEXT NOT NULL
);
