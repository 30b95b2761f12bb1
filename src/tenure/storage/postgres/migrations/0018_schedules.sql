-- tenure schema, version 18 (PostgreSQL): schedules. One row per scheduled kind, written by
-- every worker that runs the kind: `through` is the last slot dealt with (fired or counted as
-- missed), advanced only forward by a conditional write, so that any number of workers may pass
-- over the same slots (a slot's job is one, by its key `schedule:{kind}:{slot}`). `paused`
-- survives restarts; `triggered_at` is an operator's request for a run now, taken once.
CREATE TABLE tenure_schedules (
    kind          text        PRIMARY KEY,
    description   text        NOT NULL DEFAULT '',
    paused        boolean     NOT NULL DEFAULT false,
    through       timestamptz,
    next_slot     timestamptz,
    last_fired_at timestamptz,
    last_slot     timestamptz,
    fired         bigint      NOT NULL DEFAULT 0,
    missed        bigint      NOT NULL DEFAULT 0,
    triggered_at  timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
