"""cluster/dispatch and cluster/metrics reach PostgreSQL only through storage's DispatchPort:
no psycopg import, no query run by name, no direct sleep (loops sleep on the injected Clock)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*(ROOT / "cluster" / "dispatch").glob("*.py"), ROOT / "cluster" / "metrics.py"])


def _violations(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            out += [f"imports {m}" for m in mods if m.split(".")[0] == "psycopg" or m == "cronwheel.storage.queries"]
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("q", "fetch_all", "fetch_one", "stream"):
                out.append(f"calls {name}() at line {node.lineno}")
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "asyncio" \
                    and name in ("sleep", "wait_for"):
                out.append(f"calls asyncio.{name}() at line {node.lineno} (use the Clock)")
    return [f"{path.relative_to(ROOT)}: {v}" for v in out]


def test_dispatch_and_metrics_use_only_the_dispatch_port_and_the_clock() -> None:
    assert FILES
    assert [v for p in FILES for v in _violations(p)] == []
