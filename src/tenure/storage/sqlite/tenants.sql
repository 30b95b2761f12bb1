-- The SQLite store's named queries for tenants, API keys, limits and declared labels (conventions: jobs.sql).

-- name: declare_labels
-- `kinds` is a JSON object of kind -> the labels its job class declares.
INSERT INTO tenure_kinds (kind, labels, updated_at)
SELECT g.key, json(g.value), :now FROM json_each(:kinds) AS g WHERE true
ON CONFLICT (kind) DO UPDATE SET labels = excluded.labels, updated_at = excluded.updated_at
WHERE tenure_kinds.labels IS NOT excluded.labels;

-- name: declared_labels
SELECT kind, labels FROM tenure_kinds WHERE json_type(labels) = 'object' ORDER BY kind;

-- name: create_tenant
INSERT INTO tenure_tenants (name, created_at) VALUES (:tenant, :now)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: add_api_key
INSERT INTO tenure_api_keys (key_id, tenant, key_sha256, principal, created_at)
SELECT :key_id, t.name, :key_sha256, :principal, :now FROM tenure_tenants t WHERE t.name = :tenant
RETURNING key_id;

-- name: api_key
SELECT key_id, tenant, key_sha256, principal, created_at, revoked_at IS NOT NULL AS revoked
FROM tenure_api_keys WHERE key_id = :key_id;

-- name: api_keys
SELECT key_id, tenant, key_sha256, principal, created_at, revoked_at IS NOT NULL AS revoked
FROM tenure_api_keys WHERE :tenant IS NULL OR tenant = :tenant
ORDER BY tenant, created_at, key_id;

-- name: revoke_api_keys
UPDATE tenure_api_keys SET revoked_at = :now
WHERE tenant = :tenant AND revoked_at IS NULL AND (:key_id IS NULL OR key_id = :key_id)
RETURNING key_id;

-- name: tenants
SELECT t.name, t.created_at,
       count(k.key_id) FILTER (WHERE k.revoked_at IS NULL) AS active_keys,
       count(k.key_id) FILTER (WHERE k.revoked_at IS NOT NULL) AS revoked_keys
FROM tenure_tenants t LEFT JOIN tenure_api_keys k ON k.tenant = t.name
GROUP BY t.name, t.created_at
ORDER BY t.name;

-- Fair scheduling (inside the claim's IMMEDIATE transaction: counts and choice are exact).

-- name: tenant_limits
SELECT name, max_running FROM tenure_limits WHERE scope = 'tenant' ORDER BY name;

-- name: set_tenant_limit
INSERT INTO tenure_limits (scope, name, max_running) VALUES ('tenant', :name, :n)
ON CONFLICT (scope, name) DO UPDATE SET max_running = excluded.max_running
RETURNING name;

-- name: set_tenant_limit__clear
DELETE FROM tenure_limits WHERE scope = 'tenant' AND name = :name RETURNING name;
