-- tenure schema, version 17 (PostgreSQL): a key may be bound to a principal.
-- NULL: a service key, which may name any principal of its tenant. 'user:42': only that
-- principal; 'user:42/': it and every principal under it (user:42/session-7). The check is
-- the service's (Ledger.identify hands the binding over); the column only keeps it.
ALTER TABLE tenure_api_keys ADD COLUMN principal text;
