"""Named queries, loaded once from `sql/queries/*.sql`.

Each query starts with `-- name: <name>` followed by a one-line description comment. Queries are
handed to psycopg as `LiteralString`, so building SQL with f-strings elsewhere is a type error.
A query is *fenced* when it writes on behalf of a partition owner: it names `%(epoch)s` and must
run inside `PgStore.fenced()` (a test checks both).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import LiteralString, cast

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    parts = _NAME.split(text)
    out: dict[str, str] = {}
    # parts = [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in out:
            raise ValueError(f"duplicate query name {name!r}")
        out[name] = body.strip().rstrip(";").strip()
    return out


@cache
def all_queries() -> dict[str, LiteralString]:
    out: dict[str, LiteralString] = {}
    folder = resources.files("cronwheel.storage").joinpath("sql", "queries")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, body in parse(entry.read_text()).items():
            if name in out:
                raise ValueError(f"query {name!r} defined twice ({entry.name})")
            out[name] = cast(LiteralString, body)
    return out


def q(name: str) -> LiteralString:
    return all_queries()[name]
