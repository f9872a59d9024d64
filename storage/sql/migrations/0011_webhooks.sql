-- 0011_webhooks: push alerts. A webhook subscribes a URL to event kinds (optionally one
-- tenant's, one schedule's); a delivery is one event owed to one webhook. A delivery row is
-- written in the transaction that appends its event (storage/webhooks.py `enqueue_deliveries`),
-- so an event is never recorded without the deliveries it owes, nor a delivery without its event.
-- Any node sends due deliveries: it claims them with FOR UPDATE SKIP LOCKED and a lease
-- (next_attempt_at moved past the lease; attempts is the claim's token), so a node that dies
-- mid-delivery leaves the row due again when its lease lapses (cluster/webhooks/).
CREATE TABLE webhooks (
    id          uuid PRIMARY KEY,
    tenant      text,                       -- NULL: every tenant's events and cluster events (admins)
    url         text NOT NULL,
    secret      text NOT NULL,              -- HMAC-SHA256 key of the signature header
    kinds       text[] NOT NULL,
    schedule_id uuid,                       -- NULL: any schedule's events (and those of none)
    description text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    created_by  text
);
CREATE INDEX webhooks_by_tenant ON webhooks (tenant);

CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY,
    webhook_id      uuid NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id        bigint NOT NULL,
    state           text NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    claimed_by      text,
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL,
    finished_at     timestamptz
);
-- What the senders poll: due pending deliveries, oldest first.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at);
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);
