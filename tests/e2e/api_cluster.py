"""Shared by the API end-to-end tests: a real cluster (PostgreSQL, etcd, node processes) whose
node serves the API with an auth file, and a small client that calls it like a user would."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from cronwheel.devtools.harness import ProcessCluster
from cronwheel.token_format import hash_token
from cronwheel.v1 import admin_pb2_grpc, common_pb2, scheduler_pb2, scheduler_pb2_grpc

from .helpers import wait_until

# name -> (token, auth-file entry without its hash)
TOKENS: dict[str, tuple[str, dict[str, Any]]] = {
    "admin": ("tok-admin-0123456789", {"name": "ops", "admin": True}),
    "acme": ("tok-acme-0123456789", {"name": "acme-ci", "tenant": "acme"}),
    "globex": ("tok-globex-0123456789", {"name": "globex-ci", "tenant": "globex"}),
    "fuzz": ("tok-fuzz-0123456789", {"name": "fuzzer", "tenant": "fuzz"}),
}
YEARLY = "0 0 1 1 *"  # fires once a year: nothing fires by itself during a test


def write_auth_file(path: Path) -> Path:
    entries = [{**entry, "sha256": hash_token(tok)} for tok, entry in TOKENS.values()]
    path.write_text(json.dumps({"tokens": entries}))
    return path


@contextmanager
def api_cluster(partitions: int = 8, auth: bool = True) -> Iterator[tuple[ProcessCluster, str]]:
    """A cluster with one node; yields (cluster, node address). $CRONWHEEL_KEEP_LOGS=DIR keeps the
    cluster's logs there (for a failure's post-mortem)."""
    keep = os.environ.get("CRONWHEEL_KEEP_LOGS")
    workdir = Path(tempfile.mkdtemp(prefix="api-", dir=keep)) if keep else None
    with ProcessCluster(partitions=partitions, lease_ttl_s=3, workdir=workdir) as c:
        extra = ["--auth-file", str(write_auth_file(c.workdir / "auth.json"))] if auth else []
        node = c.start_node("n1", *extra)
        wait_until(lambda: any(" ready (" in ln for ln in node.lines), 30, "n1 to be ready (health SERVING)")
        yield c, node.address


@dataclass
class Failure:
    code: grpc.StatusCode
    details: str


class Api:
    """Calls as one token (None: no credentials). `call` returns the response, `fails` the error."""

    def __init__(self, address: str, who: str | None, channel: grpc.Channel | None = None) -> None:
        self.channel = channel or grpc.insecure_channel(address)
        self.metadata = (("authorization", f"Bearer {TOKENS[who][0]}"),) if who else ()
        self.scheduler = scheduler_pb2_grpc.SchedulerServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)

    def _method(self, rpc: str) -> Any:
        return getattr(self.admin if rpc in ("ClusterStatus", "ListEvents") else self.scheduler, rpc)

    def call(self, rpc: str, request: Any, metadata: tuple[tuple[str, str], ...] | None = None) -> Any:
        return self._method(rpc)(request, metadata=self.metadata if metadata is None else metadata, timeout=20)

    def fails(self, rpc: str, request: Any, metadata: tuple[tuple[str, str], ...] | None = None) -> Failure:
        try:
            resp = self.call(rpc, request, metadata)
        except grpc.RpcError as exc:
            return Failure(exc.code(), exc.details() or "")
        raise AssertionError(f"{rpc} succeeded: {resp}")

    def create(self, **fields: Any) -> common_pb2.Schedule:
        base: dict[str, Any] = dict(name="s", cron=YEARLY, timezone="UTC", job_type="job",
                                    misfire_policy=common_pb2.MISFIRE_POLICY_SKIP)
        base.update(fields)
        return self.call("CreateSchedule",
                         scheduler_pb2.CreateScheduleRequest(schedule=common_pb2.Schedule(**base))).schedule

    def submit(self, **fields: Any) -> common_pb2.Execution:
        base: dict[str, Any] = dict(type="job")
        base.update(fields)
        return self.call("SubmitJob", scheduler_pb2.SubmitJobRequest(**base)).execution
