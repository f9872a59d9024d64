"""The bearer token's format is written once (cronwheel/token_format.py, issue 49): the node's
CreateToken and the CLI's offline bootstrap token both use it, and a token the CLI makes offline
is one the node's auth file check accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cronwheel import cli
from cronwheel.cluster.api.auth import load_auth
from cronwheel.token_format import PREFIX, hash_token

ROOT = Path(__file__).resolve().parents[2]
SPELLED = re.compile(r"[\"']cw_[\"']|sha256\(token")


def test_the_offline_token_is_the_nodes_format_and_its_entry_is_accepted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["token", "new", "--offline", "--json", "--admin", "--name", "ops"]) == 0
    made = json.loads(capsys.readouterr().out)
    token, entry = made["token"], made["entry"]
    assert token.startswith(PREFIX) and entry["sha256"] == hash_token(token)
    (tmp_path / "auth.json").write_text(json.dumps({"tokens": [entry]}))
    assert load_auth(str(tmp_path / "auth.json")).tokens[hash_token(token)].admin


def test_the_format_is_spelled_nowhere_else() -> None:
    found = sorted(f"{p.relative_to(ROOT)}:{n}" for folder in ("cronwheel", "cluster", "client", "storage")
                   for p in (ROOT / folder).rglob("*.py") if p.name != "token_format.py"
                   for n, line in enumerate(p.read_text().splitlines(), 1) if SPELLED.search(line))
    assert found == [], found
