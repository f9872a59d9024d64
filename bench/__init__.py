"""The benchmarks: `python -m bench.<name>` (each module's docstring says what it measures).

They start PostgreSQL, etcd, nodes and workers as children while their own gRPC clients run, so
gRPC's fork handlers must be off before any of them imports gRPC (cronwheel.devtools.localservers): done
here, for every module of the package, whatever it imports first.
"""

import cronwheel.devtools.localservers  # noqa: F401
