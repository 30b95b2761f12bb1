-- tenure schema, version 17 (SQLite): a key may be bound to a principal (see the PostgreSQL
-- version for what the values mean).
ALTER TABLE tenure_api_keys ADD COLUMN principal text;
