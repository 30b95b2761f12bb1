-- tenure schema, version 9 (SQLite): unchanged. PostgreSQL's version 9 drops the events'
-- foreign key (a trigger per row there); SQLite checks it with an index lookup in process,
-- and dropping it would mean rebuilding the table.
SELECT 1;
