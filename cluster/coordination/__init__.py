"""Coordination: who owns which partition, under which fencing epoch, trusted until when.

`Coordinator` (etcd membership, partition keys created only if absent, epochs recorded in
PostgreSQL before anything is announced), `assignment` (rendezvous with bounded loads, pure),
`partition_lease` (trust arithmetic on the monotonic clock, pure), `etcd` (the v3 client).
A partition is acted on only while it is owned and the local trust window is open; the
database fence (storage) is what refuses a node that acts anyway.
"""
