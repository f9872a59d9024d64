"""Served over HTTPS (`--https-cert/--https-key`), the console marks its cookies Secure (over
plain HTTP on 127.0.0.1 it cannot: the browser would drop them). No browser needed: the login
page's Set-Cookie header is read directly."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.browser.conftest import start_console

pytestmark = [pytest.mark.e2e]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_over_https_the_cookies_are_secure_httponly_and_strict(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    console = start_console("127.0.0.1:1", "--https-cert", str(cert), "--https-key", str(key))
    try:
        assert console.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(cert))
        ctx.check_hostname = False
        with urllib.request.urlopen(console.url + "/login", context=ctx, timeout=10) as r:
            cookie = r.headers["Set-Cookie"]
            assert r.headers["Server-Timing"].startswith("app;dur=")
        assert cookie.startswith("cw_login=")
        flags = {f.strip().lower() for f in cookie.split(";")[1:]}
        assert {"secure", "httponly", "samesite=strict"} <= flags
    finally:
        console.stop()
