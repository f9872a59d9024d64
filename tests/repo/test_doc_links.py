"""The docs link only to files that exist, and the README stays a front door.

Every relative link of README.md and docs/*.md (`[text](path)` or `[text](path#anchor)`, outside
code) must name a file or folder of the repository, resolved from the linking file's folder.
Anchors are not checked (headings change with others' edits; a missing file is the failure a
reader cannot recover from). Web links (`http:`, `https:`, `mailto:`) and links to an anchor of
the same page are left alone.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300  # issue 49: a front door of about 250 lines, never more than 300

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The relative link targets of a markdown text, without their anchors, outside code."""
    text = _CODE.sub("", _FENCE.sub("", text))
    out = []
    for target in _LINK.findall(text):
        if _EXTERNAL.match(target) or target.startswith("#"):
            continue
        out.append(target.split("#", 1)[0])
    return out


def broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    """`doc: target` for each relative link of `doc` that names nothing in the repository."""
    out = []
    for target in relative_links(doc.read_text(encoding="utf-8")):
        path = (root / target.lstrip("/")) if target.startswith("/") else (doc.parent / target)
        if not path.resolve().exists():
            out.append(f"{doc.relative_to(root)}: {target}")
    return out


def test_every_relative_link_in_the_docs_names_a_file_that_exists() -> None:
    docs = doc_files()
    assert len(docs) > 5 and all(d.exists() for d in docs)
    assert [b for d in docs for b in broken_links(d)] == []


def test_the_link_check_finds_a_link_to_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("x", encoding="utf-8")
    doc = tmp_path / "README.md"
    doc.write_text(
        "[ok](docs/here.md) [ok too](docs/here.md#part) [gone](docs/gone.md#part) [web](https://x.org/a.md)\n"
        "[same page](#top) `[in code](docs/code.md)`\n"
        "```\n[in a fence](docs/fence.md)\n```\n[folder](docs/) [up](../nowhere/else.md)\n",
        encoding="utf-8",
    )
    assert broken_links(doc, tmp_path) == ["README.md: docs/gone.md", "README.md: ../nowhere/else.md"]


def test_the_readme_is_a_front_door_of_at_most_300_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md is {lines} lines: move history to docs/perf-log.md"
