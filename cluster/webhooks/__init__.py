"""Push alerts: webhook subscriptions and their deliveries (`payload.py` pure, `sender.py` the loop).

A webhook subscribes a URL to event kinds of the event log (`payload.EVENT_KINDS`; by default
the alerts `payload.ALERT_KINDS`), optionally of one tenant and one schedule.

Invariants:
- **Durable.** An event is its deliveries' outbox (storage/webhooks.py): it is appended with
  `webhooks_pending` set, and a sender fans it out to its deliveries later, in a transaction of
  its own, so an alert that was committed is owed to every matching webhook, whatever crashes
  next, and no fan-out lengthens a transaction that holds a partition's fence.
- **At-least-once, deduplicable.** A delivery keeps its id across attempts (header
  `Cronwheel-Delivery`); it ends `delivered` only after a 2xx answer. A node that dies
  mid-request writes nothing, and the delivery is sent again when its claim's lease lapses.
- **Signed.** `Cronwheel-Signature: t=<unix ts>,v1=<hex HMAC-SHA256(secret, f"{t}.{body}")>`
  (cronwheel.v1.webhook_signature, shared with the client's verifier).
- **Never exposed.** A URL and, at every send, the address its host resolves to pass the node's
  egress policy (cronwheel/egress.py), and the request goes to the address checked; a tenant
  sees "refused by egress policy" or "delivery failed", never a receiver's or a socket's words.
- **Never in firing's way, nor in another tenant's.** Any node sends (no partition ownership
  involved): a separate task claims due rows with SKIP LOCKED, holds no lock or connection
  during a request, each request has a total deadline, and tenants take turns for the sender's
  slots, one tenant holding at most `per_tenant` of them.

Which node sends: any node, by lease, not the partition owner fenced. Sending is not a partition
write (a duplicate send is allowed, a lost one is not), events without a partition (API audit
events) need a sender too, and a lease survives partition moves without hand-off.

How it fails: a receiver down or slow costs retries (the one retry policy,
cluster/dispatch/policy.py) and, after `max_attempts`, a `failed` delivery (visible with
`cronwheel webhook deliveries`); PostgreSQL away defers rounds; nothing here stops the node.
"""
