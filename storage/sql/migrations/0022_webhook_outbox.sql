-- 0022_webhook_outbox: an event is its own webhook outbox (issue 48, item 3). Until now every
-- event insert also inserted its webhook deliveries in the same transaction, which for the fire
-- batch and a completion is a transaction holding the partition fence or the execution's row:
-- a fan-out over many webhooks lengthened exactly the transactions that must stay short. Now an
-- event is appended with `webhooks_pending` true (the column's default: no insert names it), and
-- the senders fan pending events out to their deliveries later, in their own transaction that
-- clears the flag (webhooks.sql `fan_out_events`). An event committed is a delivery owed: a node
-- that dies between the two leaves the flag set, and any sender fans it out.
-- Existing events already have their deliveries: they get false, then the default becomes true
-- (both without rewriting the table).
ALTER TABLE events ADD COLUMN webhooks_pending boolean NOT NULL DEFAULT false;
ALTER TABLE events ALTER COLUMN webhooks_pending SET DEFAULT true;
CREATE INDEX events_webhooks_pending ON events (id) WHERE webhooks_pending;
-- What a tenant may see of a failed attempt is "refused by egress policy" or "delivery failed"
-- and the status code (issue 48): the errors recorded before said more (a connection error, the
-- receiver's reason phrase), and they are no more shown.
UPDATE webhook_deliveries SET last_error = 'delivery failed'
 WHERE last_error IS NOT NULL AND last_error NOT LIKE 'the event is no longer in the log%';
