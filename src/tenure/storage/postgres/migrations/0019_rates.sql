-- tenure schema, version 19 (PostgreSQL): fleet-wide rate limits. One row per rate key: its
-- theoretical arrival time (GCRA), epoch seconds by the database's clock, moved forward by the
-- claims it allows (storage.limits.RateBook) and by a handler's `RateLimited` (a hold), and
-- the tenant it served last (the next claim starts its round of the key's tenants after it).
CREATE TABLE tenure_rates (
    key         text             PRIMARY KEY,
    tat         double precision NOT NULL,
    last_tenant text
);
