"""The tree is the architecture: one test holds the picture (issue 49, item 3).

Each rule below is a function of the tree's sources (path relative to the repository -> text)
that returns its violations, read with `ast` (import-linter cannot see packages mapped from
top-level folders, nor docstrings, calls or SQL text). Every rule passes on the tree
(test_the_tree_keeps_the_rule) and reports a violation planted in a copy of the tree's sources
(test_each_rule_reports_a_planted_violation), so a rule that has gone blind fails too; and the
tables name only modules that exist (test_the_tables_name_only_what_exists).

    layers      wheel, cron and the gRPC contract (v1) at the bottom, then storage, then
                cluster. A layer imports its own package, lower layers and the shared leaves;
                never upward, never a peer, never the top (CLI, console, dev) or the dev tools.
                The client is a peer of cluster that imports only the contract. A shared leaf
                imports only leaves.
    console     the web console imports the Client only (and the shared leaves)
    cli         the CLI's command modules go through the Client: only the server commands'
                modules (migrate, dev, node, worker: cli/commands.py; rest: cli/rest.py) import cluster or storage
    devtools    no product room (the layers, the shared leaves, the console, the CLI but its
                server commands) imports the dev tools (cronwheel/devtools/)
    chaos       chaos drives the product through the Client, the CLI and processes (the dev
                tools start the servers); its checker, model and history import no cronwheel
                code but the shared leaves
    servicers   every gRPC servicer (a class over a generated `*Servicer`) lives in cluster/api/
    pure_core   wheel and cron do no I/O: no asyncio, socket, psycopg, grpc, os, time and the
                like, no clock reads (`datetime.now()`), no open() or print()
    no_sql      cluster runs no SQL: no psycopg, no query loader, no query run by name, no SQL
                text (storage/ is the port; storage/sql/queries holds the statements)
    clock       cluster waits on the injected Clock: no asyncio.sleep(x) but the yield
                sleep(0), no asyncio.wait_for, no time.sleep
    bench       a bench module may import a part of cluster/storage it measures, or the statement
                behind a bare-SQL floor, and names each such import in its docstring
    door        chaos and the e2e/chaos tests create work only through the client (issue 16);
                reading the database to check what happened is fine
"""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

Sources = dict[str, str]  # path relative to ROOT -> text

# Folder -> import name: pyproject's package-dir (test_the_tables_name_only_what_exists checks it
# is covered), then the tools beside the product and the tests the door rule reads.
FOLDERS: dict[str, str] = {
    "cronwheel": "cronwheel", "proto/cronwheel/v1": "cronwheel.v1", "wheel": "cronwheel.wheel",
    "cron": "cronwheel.cron", "storage": "cronwheel.storage", "cluster": "cronwheel.cluster",
    "client": "cronwheel.client", "chaos": "chaos", "bench": "bench",
    "tests/e2e": "tests.e2e", "tests/chaos": "tests.chaos",
}
LAYERS: dict[str, int] = {"cronwheel.wheel": 0, "cronwheel.cron": 0, "cronwheel.v1": 0, "cronwheel.storage": 1,
                          "cronwheel.cluster": 2, "cronwheel.client": 2}
# A layer that may import nothing of cronwheel beyond its own package, the leaves and these: the
# client talks to the cluster through the gRPC contract only (users install it to call a node).
ONLY: dict[str, set[str]] = {"cronwheel.client": {"cronwheel.v1"}}
# Shared leaves: any layer, the console and chaos may import them; they import only each other.
LEAVES = {"cronwheel", "cronwheel.backoff", "cronwheel.clock", "cronwheel.egress",
          "cronwheel.entropy", "cronwheel.errors", "cronwheel.failpoints", "cronwheel.heap", "cronwheel.http_target",
          "cronwheel.jitter", "cronwheel.limits", "cronwheel.logs", "cronwheel.secret_store", "cronwheel.times",
          "cronwheel.token_format", "cronwheel.tracing"}
# The dev tools (cronwheel/devtools/): real servers on loopback, `cronwheel dev`, the demo worker
# and the process harness of the tests, bench and chaos. They may import anything; no product room
# imports them but the CLI's server commands (`cronwheel dev`).
DEVTOOLS = "cronwheel.devtools"
# The top: the CLI and the console. It may import anything; only chaos and the dev tools (the
# CLI's entry) and the tests import it.
TOP = re.compile(r"cronwheel\.(cli|console|__main__)(\..+)?")
CONSOLE = "cronwheel.console"
# The CLI's server commands (node, migrate, worker, dev, secrets; and rest, the REST server): the
# modules of cli/ that may import cluster and storage; the other command modules go through the Client.
CLI_SERVER = {"cronwheel.cli.commands", "cronwheel.cli.rest"}
SERVER = ("cronwheel.cluster", "cronwheel.storage")
CLIENT = "cronwheel.client"
# The CLI's entry (`main`): the harness (devtools/harness.py) migrates through it and chaos runs a
# skewed node in-process through it (skewed.py).
CLI = "cronwheel.cli"
# chaos's judges: pure functions of a recorded history.
JUDGES = re.compile(r"chaos\.(checker\w*|model|history)")
# Imports that are I/O or a clock for the pure core (first component of the module).
IMPURE = {"asyncio", "socket", "ssl", "select", "selectors", "psycopg", "psycopg_pool", "grpc", "aetcd", "time",
          "os", "io", "subprocess", "threading", "multiprocessing", "signal", "shutil", "tempfile", "pathlib",
          "urllib", "http", "sqlite3"}
CLOCK_READS = {"now", "utcnow", "today"}
IMPURE_BUILTINS = {"open", "print", "input"}
# Calls that run SQL: DB-API calls always, the store's runners when given a query's name.
DB_CALLS = {"q", "cursor", "execute", "executemany", "fetchone", "fetchall", "fetchmany"}
QUERY_RUNNERS = {"fetch_all", "fetch_one", "stream", "fetch", "one"}
SQL_TEXT = re.compile(r"\bSELECT\b.+\bFROM\b|\bINSERT INTO\b|\bUPDATE \w+ SET\b|\bDELETE FROM\b|\bON CONFLICT\b"
                      r"|\b(CREATE|ALTER|DROP) (TABLE|INDEX|FUNCTION)\b|\b(LISTEN|NOTIFY) \w|\bpg_notify\(", re.S)
DOOR_DIRS = ("chaos", "cronwheel/devtools", "tests/e2e", "tests/chaos")
BEHIND_THE_DOOR = ("cronwheel.cluster.commands",)
STORE_NAMES = {"PgStore", "StoreConfig"}


# ------------------------------------------------------------------------------ reading the tree


def read_tree(root: Path = ROOT) -> Sources:
    return {str(p.relative_to(root)): p.read_text() for folder in FOLDERS
            for p in sorted((root / folder).rglob("*.py")) if "__pycache__" not in p.parts}


def module_of(path: str) -> str:
    """The import name of a file (`cluster/node.py` -> `cronwheel.cluster.node`)."""
    folder = max((f for f in FOLDERS if path.startswith(f + "/")), key=len)
    parts = [*Path(path[len(folder) + 1:]).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join((FOLDERS[folder], *parts))


def package_of(path: str) -> str:
    """The package relative imports of a file resolve against."""
    module = module_of(path)
    return module if path.endswith("__init__.py") else module.rpartition(".")[0]


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@functools.cache
def parsed(text: str, path: str) -> ast.Module:
    return ast.parse(text, path)


@functools.cache
def raw_imports(text: str, path: str) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """(line, module, names imported from it) of each import, relative ones resolved."""
    out: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(parsed(text, path)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package_of(path).split(".")
                base = ".".join([*pkg[:len(pkg) - (node.level - 1)], *([node.module] if node.module else [])])
            out.append((node.lineno, base, tuple(a.name for a in node.names)))
    return tuple(out)


def imports(path: str, text: str, known: frozenset[str]) -> list[tuple[int, str]]:
    """(line, module) of each import of a file; `from p import m` counts as `p.m` when that is a
    module (so `from cronwheel.cli.main import api` is not `cronwheel.cli`), and as `p` otherwise."""
    out: list[tuple[int, str]] = []
    for line, base, names in raw_imports(text, path):
        subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in known]
        out += [(line, m) for m in subs]
        if len(subs) < len(names) or not names:
            out.append((line, base))
    return out


def known_modules(src: Sources) -> frozenset[str]:
    return frozenset(module_of(p) for p in src)


def cronwheel_imports(src: Sources, prefix: str | tuple[str, ...]) -> list[tuple[str, int, str, str]]:
    """(path, line, importer, imported) of every cronwheel import in the files under `prefix`."""
    known = known_modules(src)
    return [(path, line, module_of(path), m) for path, text in sorted(src.items()) if path.startswith(prefix)
            for line, m in imports(path, text, known) if within(m, "cronwheel")]


def layer_of(module: str) -> str | None:
    return next((p for p in LAYERS if within(module, p)), None)


@functools.cache
def file_calls(text: str, path: str) -> tuple[ast.Call, ...]:
    return tuple(n for n in ast.walk(parsed(text, path)) if isinstance(n, ast.Call))


def calls(src: Sources, prefix: str) -> list[tuple[str, ast.Call, str]]:
    """(path, call, the called name: `f` of `f(...)` and of `x.f(...)`) under `prefix`."""
    out = []
    for path, text in sorted(src.items()):
        if path.startswith(prefix):
            for node in file_calls(text, path):
                f = node.func
                out.append((path, node, f.id if isinstance(f, ast.Name) else
                            f.attr if isinstance(f, ast.Attribute) else ""))
    return out


def receiver(call: ast.Call) -> str:
    """`asyncio` of `asyncio.sleep(...)`, `datetime` of `datetime.datetime.now()`; "" for `f()`."""
    f = call.func
    if isinstance(f, ast.Attribute):
        v = f.value
        return v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else ""
    return ""


@functools.cache
def sql_texts(text: str, path: str) -> tuple[tuple[int, str], ...]:
    """(line, text) of the string constants, docstrings aside, that read as SQL."""
    tree = parsed(text, path)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return tuple((n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) and id(n) not in docs and SQL_TEXT.search(n.value))


# ------------------------------------------------------------------------------ the rules


def rule_layers(src: Sources) -> list[str]:
    bad = []
    product = tuple(f + "/" for f, name in FOLDERS.items() if within(name, "cronwheel"))
    for path, line, importer, m in cronwheel_imports(src, product):
        own, other = layer_of(importer), layer_of(m)
        where = f"{path}:{line}"
        if importer in LEAVES and m not in LEAVES:
            bad.append(f"{where}: the leaf {importer} imports {m}")
        if own is None or m in LEAVES or within(m, own):
            continue
        if other is None:
            bad.append(f"{where}: {own} imports {m} (the top or the dev tools)")
        elif own in ONLY and other not in ONLY[own]:
            bad.append(f"{where}: {own} may import only {sorted(ONLY[own])}: {m}")
        elif LAYERS[other] > LAYERS[own]:
            bad.append(f"{where}: {own} imports upward: {m}")
        elif LAYERS[other] == LAYERS[own]:
            bad.append(f"{where}: {own} imports its peer: {m}")
    return bad


def rule_console(src: Sources) -> list[str]:
    return [f"{path}:{line}: the console imports {m} (the Client only)"
            for path, line, importer, m in cronwheel_imports(src, "cronwheel/console/")
            if not (within(m, CONSOLE) or within(m, CLIENT) or m in LEAVES)]


def rule_cli(src: Sources) -> list[str]:
    return [f"{path}:{line}: {importer} imports {m} (only the server commands, {sorted(CLI_SERVER)}; "
            "the others go through the Client)"
            for path, line, importer, m in cronwheel_imports(src, "cronwheel/cli/")
            if importer not in CLI_SERVER and any(within(m, s) for s in SERVER)]


def rule_devtools(src: Sources) -> list[str]:
    product = tuple(f + "/" for f, name in FOLDERS.items() if within(name, "cronwheel"))
    return [f"{path}:{line}: {importer} imports the dev tool {m} (only the CLI's server commands may)"
            for path, line, importer, m in cronwheel_imports(src, product)
            if within(m, DEVTOOLS) and not within(importer, DEVTOOLS) and importer not in CLI_SERVER]


def rule_chaos(src: Sources) -> list[str]:
    bad = []
    for path, line, importer, m in cronwheel_imports(src, "chaos/"):
        if JUDGES.fullmatch(importer) and m not in LEAVES:
            bad.append(f"{path}:{line}: {importer} judges a history and imports {m} (shared leaves only)")
        elif not (within(m, CLIENT) or within(m, CLI) or within(m, DEVTOOLS) or m in LEAVES):
            bad.append(f"{path}:{line}: chaos imports {m} (the Client, the CLI and processes only)")
    return bad


def rule_servicers(src: Sources) -> list[str]:
    bad = []
    for path, text in sorted(src.items()):
        if path.startswith("cluster/api/") or not within(module_of(path), "cronwheel"):
            continue
        for node in ast.walk(parsed(text, path)):
            if isinstance(node, ast.ClassDef) and any(
                    (b.attr if isinstance(b, ast.Attribute) else b.id if isinstance(b, ast.Name) else "")
                    .endswith("Servicer") for b in node.bases):
                bad.append(f"{path}:{node.lineno}: the servicer {node.name} lives outside cluster/api/")
    return bad


def rule_pure_core(src: Sources) -> list[str]:
    bad = []
    known = known_modules(src)
    for prefix in ("wheel/", "cron/"):
        for path, text in sorted(src.items()):
            if path.startswith(prefix):
                bad += [f"{path}:{line}: imports {m} (I/O or a clock)"
                        for line, m in imports(path, text, known) if m.split(".")[0] in IMPURE]
        for path, call, name in calls(src, prefix):
            if name in CLOCK_READS and receiver(call) in ("datetime", "date"):
                bad.append(f"{path}:{call.lineno}: reads the clock ({receiver(call)}.{name})")
            elif name in IMPURE_BUILTINS and isinstance(call.func, ast.Name):
                bad.append(f"{path}:{call.lineno}: calls {name}() (I/O)")
    return bad


@functools.cache
def query_names() -> frozenset[str]:
    from cronwheel.storage.queries import all_queries

    return frozenset(all_queries())


def rule_no_sql(src: Sources) -> list[str]:
    bad = []
    known = known_modules(src)
    for path, text in sorted(src.items()):
        if not path.startswith("cluster/"):
            continue
        bad += [f"{path}:{line}: imports {m}" for line, m in imports(path, text, known)
                if m.split(".")[0] in ("psycopg", "psycopg_pool") or within(m, "cronwheel.storage.queries")]
        bad += [f"{path}:{line}: SQL text {v[:60]!r}" for line, v in sql_texts(text, path)]
    for path, call, name in calls(src, "cluster/"):
        literal = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if name in DB_CALLS or (name in QUERY_RUNNERS and call.args and isinstance(call.args[0], ast.Constant)):
            bad.append(f"{path}:{call.lineno}: runs SQL ({name}(...))")
        elif any(v in query_names() for v in literal):
            bad.append(f"{path}:{call.lineno}: names query {next(v for v in literal if v in query_names())!r}")
    return bad


def rule_clock(src: Sources) -> list[str]:
    bad = []
    for path, call, name in calls(src, "cluster/"):
        who = receiver(call)
        yields = bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value == 0
        if (who, name) == ("asyncio", "sleep") and not yields or (who, name) in (("asyncio", "wait_for"),
                                                                               ("time", "sleep")):
            bad.append(f"{path}:{call.lineno}: {who}.{name}() (wait on the injected Clock)")
    return bad


def rule_bench(src: Sources) -> list[str]:
    bad = []
    for path, line, _importer, m in cronwheel_imports(src, "bench/"):
        if within(m, "cronwheel.cluster") or within(m, "cronwheel.storage"):
            doc = ast.get_docstring(parsed(src[path], path)) or ""
            if not re.search(rf"(?<![\w.]){re.escape(m)}(?!\w|\.\w)", doc):
                bad.append(f"{path}:{line}: imports {m}, which its docstring does not name (say what it measures "
                           "with it, or which bare-SQL floor it is)")
    return bad


def rule_door(src: Sources) -> list[str]:
    bad = []
    for path, text in sorted(src.items()):
        if not path.startswith(tuple(d + "/" for d in DOOR_DIRS)):
            continue
        for line, m, names in raw_imports(text, path):
            if within(m, "cronwheel.storage"):
                bad += [f"{path}:{line}: imports {n} (create work through cronwheel.client)"
                        for n in names if n in STORE_NAMES]
            if any(within(m, b) for b in BEHIND_THE_DOOR):
                bad.append(f"{path}:{line}: imports {m} (create work through cronwheel.client)")
    return bad


RULES: dict[str, Callable[[Sources], list[str]]] = {
    "layers": rule_layers, "console": rule_console, "cli": rule_cli, "devtools": rule_devtools, "chaos": rule_chaos,
    "servicers": rule_servicers, "pure_core": rule_pure_core, "no_sql": rule_no_sql, "clock": rule_clock,
    "bench": rule_bench, "door": rule_door,
}


@functools.cache
def tree() -> Sources:
    return read_tree()


# ------------------------------------------------------------------------------ the tree keeps them


@pytest.mark.parametrize("rule", RULES)
def test_the_tree_keeps_the_rule(rule: str) -> None:
    assert RULES[rule](tree()) == []


def test_the_tables_name_only_what_exists() -> None:
    """The layer test once named a module that no longer existed: every module the tables name is
    in the tree, and every package pyproject maps is read."""
    modules = {module_of(p) for p in tree()}
    named = LEAVES | set(LAYERS) | {DEVTOOLS, CONSOLE, CLIENT, CLI} | set(BEHIND_THE_DOOR) | CLI_SERVER
    named |= {m for ms in ONLY.values() for m in ms}
    assert sorted(named - modules) == []
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert {folder: name for name, folder in package_dir.items()}.items() <= FOLDERS.items()
    unplaced = [m for m in modules if within(m, "cronwheel") and not (
        layer_of(m) or m in LEAVES or within(m, DEVTOOLS) or TOP.fullmatch(m))]
    assert unplaced == [], "a module of cronwheel/ is a shared leaf (LEAVES), a dev tool (DEVTOOLS) or the top (TOP)"


# ------------------------------------------------------------------------------ planted violations

Plant = tuple[str, str, str]  # (rule, path, text appended to the file, or a new file's text)

PLANTED: list[Plant] = [
    ("layers", "storage/planted.py", "from cronwheel.cluster.node import Node"),
    ("layers", "wheel/planted.py", "import cronwheel.storage"),
    ("layers", "cron/planted.py", "from cronwheel.v1 import common_pb2\nfrom cronwheel.wheel import TimingWheel"),
    ("layers", "cluster/planted.py", "from cronwheel.client import Client"),
    ("layers", "client/planted.py", "from cronwheel.cron import parse_schedule"),
    ("layers", "client/planted.py", "from cronwheel.storage.store import PgStore"),
    ("layers", "client/planted.py", "from ..cluster.node import Node"),
    ("layers", "client/planted.py", "from .. import storage"),
    ("layers", "client/planted.py", "from cronwheel.cli.main import api"),
    ("layers", "storage/planted.py", "from cronwheel.devtools.localservers import LocalPostgres"),
    ("layers", "storage/planted.py", "from cronwheel.console import app"),
    ("layers", "cluster/planted.py", "from cronwheel.cli.main import main"),
    ("layers", "cronwheel/errors.py", "\nfrom cronwheel.storage import PgStore\n"),
    ("console", "cronwheel/console/planted.py", "from cronwheel.cluster.api import auth"),
    ("console", "cronwheel/console/planted.py", "from cronwheel.v1 import scheduler_pb2"),
    ("console", "cronwheel/console/planted.py", "from cronwheel.storage import PgStore"),
    ("console", "cronwheel/console/app.py", "\nfrom cronwheel.devtools import dev\n"),
    ("cli", "cronwheel/cli/api.py", "\nfrom cronwheel.cluster.api.auth import load_auth\n"),
    ("cli", "cronwheel/cli/console.py", "\ndef f():\n    from cronwheel.cluster.api.auth import exposure_refusal\n"),
    ("cli", "cronwheel/cli/webhook.py", "\nfrom cronwheel.cluster.webhooks import sender\n"),
    ("cli", "cronwheel/cli/planted.py", "from cronwheel.storage import PgStore"),
    ("cli", "cronwheel/cli/planted.py", "from ..cluster import node"),
    ("chaos", "chaos/planted.py", "from cronwheel.cluster.firing.firer import FiringConfig"),
    ("chaos", "chaos/planted.py", "from cronwheel.storage import migrate"),
    ("chaos", "chaos/planted.py", "from cronwheel.cron import jitter_offset_s"),
    ("chaos", "chaos/planted.py", "import cronwheel.wheel"),
    ("chaos", "chaos/planted.py", "from cronwheel.v1 import scheduler_pb2"),
    ("chaos", "chaos/cluster.py", "\nfrom cronwheel.cluster.coordination.etcd import Etcd\n"),
    ("chaos", "chaos/checker_planted.py", "from cronwheel.client import Client"),
    ("chaos", "chaos/model.py", "\nfrom cronwheel.cli.main import main\n"),
    ("chaos", "chaos/history.py", "\nfrom cronwheel.devtools.localservers import free_port\n"),
    ("devtools", "cluster/planted.py", "from cronwheel.devtools.localservers import LocalEtcd"),
    ("devtools", "storage/planted.py", "import cronwheel.devtools"),
    ("devtools", "client/planted.py", "from cronwheel.devtools import demo"),
    ("devtools", "cron/planted.py", "from cronwheel.devtools.harness import ProcessCluster"),
    ("devtools", "cronwheel/console/app.py", "\nfrom cronwheel.devtools.dev import run_dev\n"),
    ("devtools", "cronwheel/cli/api.py", "\nfrom cronwheel.devtools.harness import ProcessCluster\n"),
    ("devtools", "cronwheel/errors.py", "\nfrom cronwheel.devtools import localservers\n"),
    ("servicers", "cluster/dispatch/planted.py", "from cronwheel.v1 import dispatch_pb2_grpc\n"
                                                 "class S(dispatch_pb2_grpc.DispatchServiceServicer):\n    pass"),
    ("servicers", "cluster/planted.py", "from cronwheel.v1.admin_pb2_grpc import AdminServiceServicer\n"
                                        "class S(AdminServiceServicer):\n    pass"),
    ("pure_core", "cron/planted.py", "import asyncio"),
    ("pure_core", "cron/planted.py", "import time"),
    ("pure_core", "wheel/planted.py", "import socket"),
    ("pure_core", "wheel/planted.py", "from psycopg.rows import dict_row"),
    ("pure_core", "wheel/planted.py", "import grpc"),
    ("pure_core", "cron/planted.py", "from os import environ"),
    ("pure_core", "cron/planted.py", "from datetime import datetime\nNOW = datetime.now()"),
    ("pure_core", "cron/planted.py", "import datetime\nNOW = datetime.datetime.now(datetime.UTC)"),
    ("pure_core", "wheel/planted.py", "TEXT = open('x').read()"),
    ("no_sql", "cluster/planted.py", "import psycopg"),
    ("no_sql", "cluster/planted.py", "from psycopg.rows import dict_row"),
    ("no_sql", "cluster/planted.py", "import psycopg_pool"),
    ("no_sql", "cluster/planted.py", "from cronwheel.storage.queries import q"),
    ("no_sql", "cluster/planted.py", "from cronwheel.storage import queries"),
    ("no_sql", "cluster/planted.py", "conn.execute(sql)"),
    ("no_sql", "cluster/planted.py", "cur = conn.cursor()"),
    ("no_sql", "cluster/planted.py", "store.fetch_all('x', {})"),
    ("no_sql", "cluster/planted.py", "store.stream('x', {})"),
    ("no_sql", "cluster/planted.py", "run(store, 'claim_deliveries', {})"),
    ("no_sql", "cluster/planted.py", "STMT = 'SELECT id FROM executions WHERE partition = %(p)s'"),
    ("no_sql", "cluster/planted.py", "STMT = f'UPDATE executions SET state = {state}'"),
    ("no_sql", "cluster/planted.py", "STMT = '''INSERT INTO events (kind) VALUES (%s)'''"),
    ("no_sql", "cluster/node.py", "\nLISTEN = 'LISTEN cronwheel_changes'\n"),
    ("clock", "cluster/planted.py", "import asyncio\nasync def f():\n    await asyncio.sleep(1.5)"),
    ("clock", "cluster/planted.py", "import asyncio\nasync def f(x):\n    await asyncio.wait_for(x, 2)"),
    ("clock", "cluster/planted.py", "import time\ntime.sleep(0.1)"),
    ("bench", "bench/planted.py", '"""A bench."""\nfrom cronwheel.cluster.firing.firer import FiringConfig'),
    ("bench", "bench/planted.py", '"""A bench."""\nfrom cronwheel.storage import PgStore'),
    ("bench", "bench/wheel.py", "\nfrom cronwheel.storage.queries import q\n"),
    ("bench", "bench/planted.py", '"""Measures cronwheel.storage.queries."""\nfrom cronwheel.storage import PgStore'),
    ("door", "chaos/planted.py", "from cronwheel.cluster.commands.runs import submit_job"),
    ("door", "tests/e2e/planted.py", "import cronwheel.cluster.commands.schedules"),
    ("door", "tests/chaos/planted.py", "from cronwheel.storage import PgStore, StoreConfig"),
    ("door", "tests/e2e/planted.py", "from cronwheel.storage.store import PgStore"),
]

# Near misses each rule must let through (on the same tree).
ALLOWED: list[Plant] = [
    ("layers", "cluster/planted.py", "from cronwheel.storage import PgStore\nfrom cronwheel.jitter import offset_s"),
    ("layers", "client/planted.py", "from . import calls\nfrom cronwheel.v1 import dispatch_pb2\n"
                                    "from cronwheel.errors import NotFound\nfrom cronwheel import limits"),
    ("layers", "cron/planted.py", "from cronwheel.errors import InvalidArgument\nfrom cronwheel import jitter"),
    ("console", "cronwheel/console/planted.py", "from cronwheel.client import Client\nfrom . import forms\n"
                                                "from cronwheel.clock import Clock"),
    ("cli", "cronwheel/cli/planted.py", "from cronwheel.client import Client\nfrom cronwheel.cli.commands import "
                                        "exposure_refusal\nfrom cronwheel.errors import InvalidArgument"),
    ("cli", "cronwheel/cli/commands.py", "\nfrom cronwheel.storage import PgStore\n"),
    ("chaos", "chaos/planted.py", "from cronwheel.client import Client\nfrom cronwheel.cli.main import main\n"
                                  "from cronwheel.devtools.localservers import LocalEtcd\nimport psycopg\n"
                                  "from cronwheel.devtools.harness import ProcessCluster"),
    ("chaos", "chaos/checker_planted.py", "from chaos.history import History\nfrom cronwheel import jitter"),
    ("devtools", "cronwheel/cli/commands.py", "\nfrom cronwheel.devtools.dev import run_dev\n"),
    ("devtools", "cronwheel/devtools/planted.py", "from cronwheel.devtools import localservers\n"
                                                  "from cronwheel.storage.migrate import migrate"),
    ("servicers", "cluster/api/planted.py", "from cronwheel.v1 import dispatch_pb2_grpc\n"
                                            "class S(dispatch_pb2_grpc.DispatchServiceServicer):\n    pass"),
    ("pure_core", "cron/planted.py", "from datetime import datetime, UTC\nT = datetime.fromtimestamp(0, UTC)\n"
                                     "import zoneinfo\nimport hashlib"),
    ("no_sql", "cluster/planted.py", "await store.partitions.record_epoch(p, e, 'n1')\n"
                                     "log.info('cannot listen on x', extra={'event': 'select_from'})"),
    ("no_sql", "cluster/planted.py", 'def f():\n    """Runs SELECT ... FROM executions via the port."""'),
    ("clock", "cluster/planted.py", "import asyncio\nasync def f(clock):\n    await asyncio.sleep(0)\n"
                                    "    await clock.sleep(1.5)"),
    ("bench", "bench/planted.py", '"""Measures cronwheel.cluster.firing.firer (its FiringConfig)."""\n'
                                  "from cronwheel.cluster.firing.firer import FiringConfig"),
    ("door", "tests/e2e/planted.py", "from cronwheel.client import Client\nfrom cronwheel.storage import migrate\n"
                                     "import psycopg"),
]


def planted(path: str, text: str) -> Sources:
    src = dict(tree())
    src[path] = src.get(path, "") + text + "\n"
    return src


@pytest.mark.parametrize(("rule", "path", "text"), PLANTED, ids=[f"{r}:{p}:{t[:40]}" for r, p, t in PLANTED])
def test_each_rule_reports_a_planted_violation(rule: str, path: str, text: str) -> None:
    found = RULES[rule](planted(path, text))
    assert found and all(v.startswith(path + ":") for v in found), found


@pytest.mark.parametrize(("rule", "path", "text"), ALLOWED, ids=[f"{r}:{p}:{t[:40]}" for r, p, t in ALLOWED])
def test_each_rule_lets_a_near_miss_through(rule: str, path: str, text: str) -> None:
    assert RULES[rule](planted(path, text)) == []


def test_every_rule_has_planted_violations_and_near_misses() -> None:
    assert {r for r, _, _ in PLANTED} == set(RULES) == {r for r, _, _ in ALLOWED}
