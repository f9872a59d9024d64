"""The gRPC edge, every servicer (SchedulerService, AdminService, DispatchService over
cluster.dispatch, ...), authentication and the one table that maps
domain errors to status codes (`grpc_errors`). Servicers convert requests (`convert`), call
`cluster.commands`, and convert the answers back; they decide nothing themselves.

Dependencies are narrow: a servicer gets the store, the clock and (AdminService) a
`status.StatusProvider`, never the Node; `services.grpc_services(node)` is the one place that
builds them. A request that does not decode is INVALID_ARGUMENT for every RPC (`requests`,
wrapped around each deserializer by the interceptor).
"""
