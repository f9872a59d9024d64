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

# Folder -> (import name, layer). A module may import its own layer or lower ones only.
LAYERS: dict[str, tuple[str, int]] = {
    "wheel": ("cronwheel.wheel", 0),
    "cron": ("cronwheel.cron", 0),
    "proto/cronwheel/v1": ("cronwheel.v1", 0),
    "storage": ("cronwheel.storage", 1),
    "cluster": ("cronwheel.cluster", 2),
    "client": ("cronwheel.client", 3),
}
# Leaves any layer may use.
SHARED = {"cronwheel", "cronwheel.clock", "cronwheel.errors"}
# The top: CLI, dev orchestration and local servers may import anything; nothing imports them
# except tests, bench and chaos (localservers is shared with those).
TOP = {"cronwheel.cli", "cronwheel.cli_commands", "cronwheel.cli_explain", "cronwheel.dev"}


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for name, layer in LAYERS.values():
        if module == name or module.startswith(name + "."):
            if best is None or len(name) > best[0]:
                best = (len(name), layer)
    return None if best is None else best[1]


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return [m for m in out if m == "cronwheel" or m.startswith("cronwheel.")]


def test_layers_import_only_downward() -> None:
    violations = []
    for folder, (name, layer) in LAYERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            for mod in imported_modules(path):
                if mod in SHARED:
                    continue
                if mod in TOP or mod == "cronwheel.localservers":
                    violations.append(f"{path.relative_to(ROOT)} imports {mod} (top layer)")
                    continue
                other = layer_of(mod)
                if other is not None and other > layer:
                    violations.append(f"{path.relative_to(ROOT)} ({name}) imports upward: {mod}")
    assert violations == []


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
