-- The PostgreSQL store's named queries for tenants, API keys, limits and declared labels (conventions: jobs.sql).

-- name: declare_labels
-- `kinds` is a JSON object of kind -> the labels its job class declares.
INSERT INTO tenure_kinds (kind, labels, updated_at)
SELECT g.key, g.value, clock_timestamp() FROM jsonb_each(%(kinds)s::jsonb) AS g
ON CONFLICT (kind) DO UPDATE SET labels = EXCLUDED.labels, updated_at = EXCLUDED.updated_at
WHERE tenure_kinds.labels IS DISTINCT FROM EXCLUDED.labels;

-- name: declared_labels
SELECT kind, labels FROM tenure_kinds WHERE jsonb_typeof(labels) = 'object' ORDER BY kind;

-- name: create_tenant
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
tenant AS (
    INSERT INTO tenure_tenants (name, created_at)
    SELECT %(tenant)s, clock.now FROM clock
    ON CONFLICT (name) DO NOTHING
    RETURNING name, created_at
)
INSERT INTO tenure_api_keys (key_id, tenant, key_sha256, created_at)
SELECT %(key_id)s, tenant.name, %(key_sha256)s, tenant.created_at FROM tenant
RETURNING key_id;

-- name: add_api_key
INSERT INTO tenure_api_keys (key_id, tenant, key_sha256, principal, created_at)
SELECT %(key_id)s, t.name, %(key_sha256)s, %(principal)s::text, clock_timestamp()
FROM tenure_tenants t WHERE t.name = %(tenant)s
RETURNING key_id;

-- name: api_key
SELECT key_id, tenant, key_sha256, principal, created_at, revoked_at IS NOT NULL AS revoked
FROM tenure_api_keys WHERE key_id = %(key_id)s;

-- name: api_keys
SELECT key_id, tenant, key_sha256, principal, created_at, revoked_at IS NOT NULL AS revoked
FROM tenure_api_keys WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
ORDER BY tenant, created_at, key_id;

-- name: revoke_api_keys
UPDATE tenure_api_keys SET revoked_at = clock_timestamp()
WHERE tenant = %(tenant)s AND revoked_at IS NULL
  AND (%(key_id)s::text IS NULL OR key_id = %(key_id)s::text)
RETURNING key_id;

-- name: tenants
SELECT t.name, t.created_at,
       count(k.key_id) FILTER (WHERE k.revoked_at IS NULL) AS active_keys,
       count(k.key_id) FILTER (WHERE k.revoked_at IS NOT NULL) AS revoked_keys
FROM tenure_tenants t LEFT JOIN tenure_api_keys k ON k.tenant = t.name
GROUP BY t.name, t.created_at
ORDER BY t.name;

-- name: tenant_limits
SELECT name, max_running FROM tenure_limits WHERE scope = 'tenant' ORDER BY name;

-- name: set_tenant_limit
INSERT INTO tenure_limits (scope, name, max_running) VALUES ('tenant', %(name)s, %(n)s)
ON CONFLICT (scope, name) DO UPDATE SET max_running = excluded.max_running
RETURNING name;

-- name: set_tenant_limit__clear
DELETE FROM tenure_limits WHERE scope = 'tenant' AND name = %(name)s RETURNING name;
