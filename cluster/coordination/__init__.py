"""Coordination: who owns which partition, under which fencing epoch, trusted until when.

`Coordinator` (etcd membership, partition keys created only if absent, epochs recorded in
PostgreSQL before anything is announced), `assignment` (rendezvous with bounded loads, pure),
`partition_lease` (trust arithmetic on the monotonic clock, pure), `etcd` (the v3 client),
`clock_skew` (the node's clock against PostgreSQL's: beyond --max-clock-skew the node stands
down, holding no partition and claiming nothing; its decision `judge` is pure).
A partition is acted on only while it is owned and the local trust window is open; the
database fence (storage) is what refuses a node that acts anyway.
"""
