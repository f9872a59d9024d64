"""The tree is the architecture: dependencies point one way, and clocks are read in one place.

import-linter cannot see packages mapped from top-level folders (it walks `cronwheel/` only), so
the layer contract is checked here from the source with `ast`.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Folder -> (import name, layer). A module may import its own package or strictly lower layers;
# a different package of the same layer is a peer and off limits (client and cluster are peers).
LAYERS: dict[str, tuple[str, int]] = {
    "wheel": ("cronwheel.wheel", 0),
    "cron": ("cronwheel.cron", 0),
    "proto/cronwheel/v1": ("cronwheel.v1", 0),
    "storage": ("cronwheel.storage", 1),
    "cluster": ("cronwheel.cluster", 2),
    "client": ("cronwheel.client", 2),
}
# Packages that may import nothing of cronwheel beyond their own package, SHARED and these: the
# client talks to the cluster through the gRPC contract only (users install it to call a node).
ONLY: dict[str, set[str]] = {"cronwheel.client": {"cronwheel.v1"}}
# Leaves any layer may use.
SHARED = {"cronwheel", "cronwheel.clock", "cronwheel.entropy", "cronwheel.errors", "cronwheel.heap",
          "cronwheel.secret_store", "cronwheel.tracing", "cronwheel.egress"}
# The top: CLI, dev orchestration and local servers may import anything; nothing imports them
# except tests, bench and chaos (localservers is shared with those).
TOP = {"cronwheel.cli", "cronwheel.cli_commands", "cronwheel.cli_explain", "cronwheel.dev"}

# cluster/ files that still run SQL by name or import psycopg because another helper owns them
# (issue 14: storage/ becomes the port). The lead empties this set when merging their branches;
# test_pending_files_still_need_their_exemption says when an entry is no longer needed.
PENDING: set[str] = set()  # files allowed to run SQL by name while a refactor is in flight: none
QUERY_RUNNERS = {"q", "fetch_all", "fetch_one", "stream"}


def layer_of(module: str) -> tuple[str, int] | None:
    """(package, layer) of a cronwheel module, the longest matching package."""
    best: tuple[str, int] | None = None
    for name, layer in LAYERS.values():
        if module == name or module.startswith(name + "."):
            if best is None or len(name) > len(best[0]):
                best = (name, layer)
    return best


def imported_modules(source: str, filename: str = "<source>", package: str = "") -> list[str]:
    """The cronwheel modules a source imports; relative imports are resolved against `package`
    (the importing module's package), so `from ..cluster import x` in cronwheel.client counts."""
    tree = ast.parse(source, filename)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0 and package:
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - (node.level - 1)])
            if node.module:
                out.append(f"{base}.{node.module}")
            else:
                out.extend(f"{base}.{a.name}" for a in node.names)
    return [m for m in out if m == "cronwheel" or m.startswith("cronwheel.")]


def package_of(folder: str, name: str, path: Path) -> str:
    """The package a file of LAYERS' `folder` (import name `name`) belongs to."""
    rel = path.relative_to(ROOT / folder).parent.parts
    return ".".join((name, *rel))


def import_violations(package: str, layer: int, source: str, where: str, importer: str = "") -> list[str]:
    """What a module of `package` (at `layer`; `importer`: its own package, for relative imports)
    may not import."""
    bad = []
    for mod in imported_modules(source, where, importer or package):
        if mod in SHARED:
            continue
        if mod in TOP or mod == "cronwheel.localservers":
            bad.append(f"{where} imports {mod} (top layer)")
            continue
        other = layer_of(mod)
        if other is None or other[0] == package:
            continue
        if package in ONLY and other[0] not in ONLY[package]:
            bad.append(f"{where} ({package}) may import only {sorted(ONLY[package])}: {mod}")
        elif other[1] > layer:
            bad.append(f"{where} ({package}) imports upward: {mod}")
        elif other[1] == layer:
            bad.append(f"{where} ({package}) imports its peer: {mod}")
    return bad


def sql_violations(source: str, where: str, query_names: set[str]) -> list[str]:
    """psycopg imports, the query loader, and calls that run a query by name: `q("x")`,
    `store.fetch_all("x", ...)` / `fetch_one` / `stream`, or any call given a known query's name."""
    bad = []
    for node in ast.walk(ast.parse(source, where)):
        mods: list[str] = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods = [node.module]
        bad += [f"{where}: imports {m}" for m in mods
                if m.split(".")[0] == "psycopg" or m == "cronwheel.storage.queries"]
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            literal = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            first_is_literal = bool(node.args) and isinstance(node.args[0], ast.Constant)
            if name == "q" or (name in QUERY_RUNNERS and first_is_literal):
                bad.append(f"{where}:{node.lineno}: runs a query by name ({name}(...))")
            elif any(v in query_names for v in literal):
                bad.append(f"{where}:{node.lineno}: names query {next(v for v in literal if v in query_names)!r}")
    return bad


def _query_names() -> set[str]:
    from cronwheel.storage.queries import all_queries

    return set(all_queries())


def test_layers_import_only_downward() -> None:
    violations = []
    for folder, (name, layer) in LAYERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            violations += import_violations(name, layer, path.read_text(), str(path.relative_to(ROOT)),
                                            package_of(folder, name, path))
    assert violations == []


def test_cluster_runs_no_sql_and_imports_no_psycopg() -> None:
    names = _query_names()
    violations = []
    for path in sorted((ROOT / "cluster").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel not in PENDING:
            violations += sql_violations(path.read_text(), rel, names)
    assert violations == []


def test_pending_files_still_need_their_exemption() -> None:
    names = _query_names()
    done = [p for p in sorted(PENDING)
            if not (ROOT / p).exists() or not sql_violations((ROOT / p).read_text(), p, names)]
    assert done == [], f"remove from PENDING (they run no SQL any more): {done}"


def test_each_layer_rule_catches_a_synthetic_violation() -> None:
    client, cluster, storage = (LAYERS[f] for f in ("client", "cluster", "storage"))
    assert import_violations(*client, "from cronwheel.cluster.node import Node", "c.py")
    assert import_violations(*client, "import cronwheel.storage", "c.py")
    assert import_violations(*client, "from cronwheel.storage.store import PgStore", "c.py")
    assert import_violations(*client, "from ..cluster.node import Node", "c.py", "cronwheel.client")
    assert import_violations(*client, "from .. import storage", "c.py", "cronwheel.client")
    assert import_violations(*client, "from . import calls", "c.py", "cronwheel.client") == []
    assert import_violations(*client, "from cronwheel.cron import parse", "c.py")
    assert import_violations(*cluster, "from cronwheel.client import Worker", "k.py")
    assert import_violations(*storage, "from cronwheel.cluster.node import Node", "s.py")
    assert import_violations(*storage, "from cronwheel.cli import main", "s.py")
    fine = "from cronwheel.v1 import dispatch_pb2\nfrom cronwheel.errors import X"
    assert import_violations(*client, fine, "c.py") == []
    assert import_violations(*cluster, "from cronwheel.storage import PgStore", "k.py") == []


def test_the_sql_rule_catches_a_synthetic_violation() -> None:
    names = {"due_schedules"}
    for bad in ("import psycopg", "from psycopg.rows import dict_row", "from cronwheel.storage.queries import q",
                "conn.execute(q('x'))", "store.fetch_all('x', {})", "store.fetch_one('x', {})",
                "store.stream('x', {})", "fetch(store, 'due_schedules', {})"):
        assert sql_violations(bad, "k.py", names), bad
    assert sql_violations("await store.partitions.record_epoch(p, e, 'n1')", "k.py", names) == []


# One door (issue 16): the chaos workload and the e2e/chaos tests create schedules and submit jobs
# through cronwheel.client, as users do; never through the API's commands or the store behind it.
# (Reading the database to check what happened is fine: they do it with plain SQL. bench/ is not
# held to this: bench/fire.py measures the fire path alone and writes its schedules directly.)
DOOR_DIRS = ("chaos", "tests/e2e", "tests/chaos")
BEHIND_THE_DOOR = ("cronwheel.cluster.commands", "cronwheel.cluster.scheduling")
STORE_NAMES = {"PgStore", "StoreConfig"}


def door_violations(source: str, where: str) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(source, where)):
        mods: list[str] = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods = [node.module]
            if node.module.split(".")[:2] == ["cronwheel", "storage"]:
                bad += [f"{where}:{node.lineno}: imports {a.name} (create work through cronwheel.client)"
                        for a in node.names if a.name in STORE_NAMES]
        bad += [f"{where}:{node.lineno}: imports {m} (create work through cronwheel.client)" for m in mods
                if any(m == b or m.startswith(b + ".") for b in BEHIND_THE_DOOR)]
    return bad


def test_chaos_and_end_to_end_tests_create_work_only_through_the_client() -> None:
    violations = []
    for folder in DOOR_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            violations += door_violations(path.read_text(), str(path.relative_to(ROOT)))
    assert violations == []


def test_the_door_rule_catches_a_synthetic_violation() -> None:
    for bad in ("from cronwheel.cluster.commands.runs import submit_job", "import cronwheel.cluster.commands.schedules",
                "from cronwheel.storage import PgStore, StoreConfig", "from cronwheel.storage.store import PgStore",
                "from cronwheel.cluster.scheduling import create_schedule"):
        assert door_violations(bad, "w.py"), bad
    fine = "from cronwheel.client import Client\nfrom cronwheel.storage import migrate\nimport psycopg"
    assert door_violations(fine, "w.py") == []


def test_pure_core_does_no_io() -> None:
    banned = {"asyncio", "psycopg", "grpc", "socket", "time", "aetcd"}
    bad = []
    for folder in ("wheel", "cron"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module.split(".")[0]]
                bad += [f"{path.relative_to(ROOT)}: {n}" for n in names if n in banned]
    assert bad == []


def _tool(name: str) -> str:
    exe = Path(sys.executable).parent / name
    found = str(exe) if exe.exists() else shutil.which(name)
    assert found, f"{name} is not installed (pip install -e '.[dev]')"
    return found


def test_ruff_clean_including_the_clock_ban() -> None:
    r = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
