"""Repository checks: the files around the code agree with it and with their tools. Compose and
the Prometheus rules (promtool), the committed gRPC stubs, ruff, the docs' links and examples.
Not unit tests of the product: they read the tree (and run its tools), as `pytest tests/repo`."""
