-- tenure schema, version 18 (SQLite): schedules (see the PostgreSQL version). Times are epoch
-- seconds, as in every table of this dialect.
CREATE TABLE tenure_schedules (
    kind          TEXT    PRIMARY KEY,
    description   TEXT    NOT NULL DEFAULT '',
    paused        INTEGER NOT NULL DEFAULT 0,
    through       REAL,
    next_slot     REAL,
    last_fired_at REAL,
    last_slot     REAL,
    fired         INTEGER NOT NULL DEFAULT 0,
    missed        INTEGER NOT NULL DEFAULT 0,
    triggered_at  REAL,
    updated_at    REAL    NOT NULL
);
