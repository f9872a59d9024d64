"""`cronwheel node` refuses bad security flags before it starts anything (exit 2, one line naming
the flag): half a TLS pair or a user without a password for etcd (issue 48, item 6), and a
listen address beyond loopback without auth (item 5, the rule of cluster/api/auth.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronwheel.cli.main import main
from cronwheel.cluster.api.auth import auth_mode, is_loopback
from cronwheel.cluster.coordination.etcd import EtcdSecurity

BASE = ["node", "--dsn", "postgresql://nobody@127.0.0.1:1/none", "--etcd", "127.0.0.1:1"]


@pytest.mark.parametrize(("flags", "named"), [
    (["--etcd-cert", "c.pem"], "--etcd-key"),
    (["--etcd-key", "k.pem"], "--etcd-cert"),
    (["--etcd-user", "cw"], "--etcd-password"),
    (["--etcd-cacert", "/nonexistent/ca.pem"], "--etcd-cacert"),
    (["--listen", "0.0.0.0:7070"], "--auth-file"),
])
def test_bad_security_flags_exit_2_naming_the_flag(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("CRONWHEEL_ETCD_PASSWORD", "CRONWHEEL_ETCD_USER", "CRONWHEEL_AUTH_FILE"):
        monkeypatch.delenv(var, raising=False)
    assert main([*BASE, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cronwheel: error: ") and named in err[0], err


def test_the_etcd_password_is_never_in_a_repr() -> None:
    sec = EtcdSecurity(user="cw", password="s3cret-pw")
    assert "s3cret-pw" not in repr(sec) and sec.validate() is sec


@pytest.mark.parametrize(("listen", "loopback"), [
    ("127.0.0.1:1", True), ("127.8.9.10:1", True), ("[::1]:1", True), ("localhost:1", True),
    ("0.0.0.0:1", False), ("[::]:1", False), (":1", False), ("10.0.0.1:1", False), ("no-such-host.invalid:1", False),
])
def test_is_loopback(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback
    assert auth_mode("", listen) == ("loopback-only" if loopback else "insecure")
    assert auth_mode("auth.json", listen) == "tokens"


@pytest.mark.parametrize("content", [None, "  \n"])
def test_worker_token_file_missing_or_empty_exits_2_naming_it(
    content: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    assert main(["worker", "cronwheel.devtools.demo", "--token-file", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--token-file" in err[0] and str(path) in err[0], err
