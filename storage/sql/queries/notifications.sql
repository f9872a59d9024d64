-- name: listen_due
-- Receive 'cronwheel_due' notifications ('<partition>:<s|o>:<id>') on this connection.
LISTEN cronwheel_due;

-- name: listen_queued
-- Receive 'cronwheel_queued' notifications (work was queued somewhere) on this connection.
LISTEN cronwheel_queued;
