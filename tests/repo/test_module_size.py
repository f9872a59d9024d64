"""The tree is the picture (issue 49, STYLE.md §1): a product module over ~600 lines says why in
its docstring, as "(Over N lines: ...)"; one that cannot say why is split by concept instead
(cluster/firing/firer.py was). The generated gRPC stubs are not written by hand and are left out."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("cronwheel", "wheel", "cron", "storage", "cluster", "client")
LIMIT = 600
SAYS_WHY = re.compile(r"\((?:A little )?[Oo]ver \d+ lines(?:, [^:)]*)?: \S")


def over_limit_without_a_reason(root: Path) -> list[str]:
    bad = []
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text()
            lines = text.count("\n")
            if lines <= LIMIT:
                continue
            doc = ast.get_docstring(ast.parse(text)) or ""
            if not SAYS_WHY.search(doc):
                bad.append(f"{path.relative_to(root)}: {lines} lines, and its docstring does not say why")
    return bad


def test_no_product_module_is_over_600_lines_unless_its_docstring_says_why() -> None:
    assert over_limit_without_a_reason(ROOT) == []


def test_a_long_module_that_does_not_say_why_is_named(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    body = "x = 1\n" * (LIMIT + 1)
    (tmp_path / "cluster" / "long.py").write_text('"""A module."""\n' + body)
    (tmp_path / "cluster" / "said.py").write_text('"""A module.\n\n(Over 400 lines: one concept.)\n"""\n' + body)
    assert over_limit_without_a_reason(tmp_path) == [f"cluster/long.py: {LIMIT + 2} lines, and its docstring "
                                                     "does not say why"]
