"""`cronwheel dev`: a whole local cluster on embedded servers, for trying cronwheel out.

Starts a real PostgreSQL and etcd (cronwheel.localservers), migrates, then (as the node and worker
land) runs scheduler nodes and a demo worker as child processes. Prints where everything is.
SIGINT (Ctrl-C) or SIGTERM stops every child, then the servers, and removes every temp dir.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, TextIO

from cronwheel.localservers import LocalEtcd, LocalPostgres
from cronwheel.storage.migrate import migrate


@dataclass
class DevCluster:
    nodes: int = 3
    partitions: int = 16
    out: TextIO = sys.stdout
    pg: LocalPostgres = field(default_factory=LocalPostgres)
    etcd: LocalEtcd = field(default_factory=LocalEtcd)

    def info(self) -> dict[str, Any]:
        return {
            "postgres": {"dsn": self.pg.dsn("cronwheel"), "pid": self.pg.pid,
                         "dir": str(self.pg.base_dir)},
            "etcd": {"endpoints": self.etcd.endpoints,
                     "pids": [m.pid for m in self.etcd.members],
                     "dir": str(self.etcd.base_dir)},
        }

    def start(self) -> None:
        self.pg.start()
        self.etcd.start()
        dsn = self.pg.create_database("cronwheel")
        migrate(dsn, partitions=self.partitions, progress=lambda m: self._say(f"migrate: {m}"))

    def stop(self) -> None:
        self.etcd.stop()
        self.pg.stop()

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def print_banner(self) -> None:
        i = self.info()
        self._say(f"postgres  {i['postgres']['dsn']}  (pid {i['postgres']['pid']})")
        self._say(f"etcd      {','.join(i['etcd']['endpoints'])}  (pids {i['etcd']['pids']})")
        self._say("ready " + json.dumps(i))
        self._say("Press Ctrl-C to stop everything.")


def run_dev(nodes: int, partitions: int) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    cluster = DevCluster(nodes=nodes, partitions=partitions)
    try:
        cluster.start()
        cluster.print_banner()
        while not stop.wait(0.5):
            pass
        print("stopping...", flush=True)
        return 0
    finally:
        cluster.stop()
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        print("stopped", flush=True)
