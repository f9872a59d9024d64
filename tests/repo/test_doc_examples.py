"""Values the docs tell a user to type are values the product accepts, and the rules the docs
state are the code's: a `--secret` example of docs/operating.md once failed the 16..200 character
rule that only docs/api.md stated (issue 49)."""

from __future__ import annotations

import re
from pathlib import Path

from cronwheel.cluster.webhooks import subscriptions

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_webhook_secret_the_docs_show_is_one_the_server_accepts() -> None:
    shown = [(d.name, v) for d in DOCS for v in re.findall(r"--secret[ =](\S+)", d.read_text(encoding="utf-8"))]
    assert shown, "no --secret example in the docs"
    for doc, value in shown:
        assert subscriptions.secret(value) == value, (doc, value)


def test_operating_states_the_webhook_secret_rule_the_server_applies() -> None:
    lo, hi = subscriptions.SECRET_CHARS
    text = " ".join((ROOT / "docs" / "operating.md").read_text(encoding="utf-8").split())
    assert f"A secret you give must be {lo} to {hi} characters without spaces or control characters" in text
