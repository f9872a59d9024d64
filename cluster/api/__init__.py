"""The gRPC edge: SchedulerService, AdminService, authentication and the one table that maps
domain errors to status codes (`grpc_errors`). Servicers convert requests (`convert`), call
`cluster.commands`, and convert the answers back; they decide nothing themselves.
"""
