"""The API edge and the commands reach PostgreSQL only through the storage port: no psycopg, no
query run by name, no SQL text. (Checked from the source with `ast`, like test_architecture.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("cluster/api", "cluster/commands")
BY_NAME = {"q", "fetch_all", "fetch_one", "stream", "fetch", "one", "cursor", "execute"}


def sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_no_psycopg_and_runs_no_query_by_name(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] == "psycopg"]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == "psycopg" or node.module == "cronwheel.storage.queries":
                bad.append(node.module)
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in BY_NAME:
                bad.append(f"{name}() at line {node.lineno}")
    assert bad == [], f"{path.relative_to(ROOT)} reaches the database around the port: {bad}"
