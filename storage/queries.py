"""Named queries, loaded once from `sql/queries/*.sql`.

Each query starts with `-- name: <name>` followed by a one-line description comment. Queries are
handed to psycopg as `LiteralString`, so building SQL with f-strings elsewhere is a type error.
A query is *fenced* when it writes on behalf of a partition owner: it names `%(epoch)s` and must
run inside `PgStore.fenced()` (a test checks both).

Fragments. A rule that several statements apply is an SQL function in schema.sql where it can be
one (the fence, the fire guard: migration 0027). A rule that is a piece of a statement's plan (CTEs
over the statement's own rows, which a function could only take as arrays built for every row) is
a fragment: `-- fragment: <name>` starts it in any .sql file, as `-- name:` starts a query, and a
query takes it with a line `-- include: <name>`, replaced by the fragment's text when the queries
are loaded. The statement sent is the one spelled out, so its plan is too; the rule is written
once (issue 49: the daily quota of the two fire statements).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^--\s*(name|fragment):\s*(\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^[ \t]*--\s*include:\s*(\w+)[ \t]*$", re.MULTILINE)


def _split(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """One file's (queries, fragments), by name; includes not expanded yet."""
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    # parts = [preamble, kind1, name1, body1, kind2, name2, body2, ...]
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in queries or name in fragments:
            raise ValueError(f"duplicate query or fragment name {name!r}")
        if kind == "name":
            queries[name] = body.strip().rstrip(";").strip()
        else:
            fragments[name] = body.strip()
    return queries, fragments


def _expand(name: str, body: str, fragments: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in fragments:
            raise ValueError(f"query {name!r} includes unknown fragment {m.group(1)!r}")
        return fragments[m.group(1)]

    return _INCLUDE.sub(one, body)


def parse(text: str) -> dict[str, str]:
    """The queries of one file's text, its own fragments included."""
    queries, fragments = _split(text)
    return {name: _expand(name, body, fragments) for name, body in queries.items()}


@cache
def all_queries() -> dict[str, LiteralString]:
    raw: dict[str, str] = {}
    fragments: dict[str, str] = {}
    folder = resources.files("cronwheel.storage").joinpath("sql", "queries")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        queries, frags = _split(entry.read_text())
        for name, body in queries.items():
            if name in raw:
                raise ValueError(f"query {name!r} defined twice ({entry.name})")
            raw[name] = body
        for name, body in frags.items():
            if name in fragments:
                raise ValueError(f"fragment {name!r} defined twice ({entry.name})")
            fragments[name] = body
    return {name: cast(LiteralString, _expand(name, body, fragments)) for name, body in raw.items()}


def q(name: str) -> LiteralString:
    return all_queries()[name]
