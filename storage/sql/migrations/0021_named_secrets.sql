-- 0021_named_secrets: the secret store's first provider (issue 48; cronwheel/secret_store.py,
-- storage/secrets.py). A named secret is a tenant's value by name ('' : the cluster's), stored
-- sealed with the nodes' key like webhooks.secret; what resolves secrets by name (HTTP targets'
-- headers) reads it through the SecretProvider protocol and never returns it to a caller.
CREATE TABLE secrets (
    tenant      text NOT NULL DEFAULT '',
    name        text NOT NULL CHECK (name ~ '^[A-Za-z0-9_.-]{1,128}$'),
    value       text NOT NULL,              -- sealed (cwsec1:KEY_ID:...); plaintext only on a cluster without a key
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);
