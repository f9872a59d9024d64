"""The egress check (cronwheel/egress.py): every address class is refused at creation naming
`url`, allowed only by --egress-allow, and checked again on the address a name resolves to when
the connection is made; a POST obeys a total deadline, follows no redirect, and what a tenant
sees of a failure carries no detail. The POSTs go to real local listeners."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cronwheel.egress import LOOPBACK, TENANT_FAILED, TENANT_REFUSED, EgressPolicy, post
from cronwheel.errors import InvalidArgument
from tests.egress_cases import ALLOWED_HOSTS, REFUSED_HOSTS

NONE = EgressPolicy()


@pytest.mark.parametrize(("kind", "host"), REFUSED_HOSTS, ids=[f"{k}:{h}" for k, h in REFUSED_HOSTS])
def test_every_refused_address_class_is_refused_at_creation_naming_url(kind: str, host: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        NONE.check_url(f"http://{host}:8080/hook")
    assert err.value.field == "url" and TENANT_REFUSED in err.value.message


@pytest.mark.parametrize("host", ALLOWED_HOSTS)
def test_global_addresses_and_names_pass_the_creation_check(host: str) -> None:
    NONE.check_url(f"https://{host}/hook")


def test_an_allow_list_lets_its_networks_and_names_through_and_nothing_else() -> None:
    allow = EgressPolicy.parse(["127.0.0.0/8", "10.1.2.3", "Internal.Example."])
    for ok in ("127.0.0.1", "[::ffff:127.0.0.1]", "10.1.2.3", "internal.example"):
        allow.check_url(f"http://{ok}/")
    for refused in ("10.1.2.4", "[::1]", "169.254.169.254", "localhost"):
        with pytest.raises(InvalidArgument):
            allow.check_url(f"http://{refused}/")
    assert allow.describe() == ("10.1.2.3/32", "127.0.0.0/8", "internal.example")
    assert EgressPolicy.parse(LOOPBACK).describe() == ("127.0.0.0/8", "::1/128", "localhost")


@pytest.mark.parametrize("bad", ["", "10.0.0.0/33", "a b", "http://x/", "x/y"])
def test_a_bad_allow_entry_names_the_flag(bad: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        EgressPolicy.parse([bad])
    assert err.value.field == "--egress-allow"


class Listener:
    """A local HTTP server that counts requests and answers what `mode` says."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.mode = "ok"
        me = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                me.hits.append(self.path)
                if me.mode == "trickle":  # status line and headers one byte every 0.3 s
                    for b in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
                        try:
                            self.wfile.write(bytes([b]))
                            self.wfile.flush()
                        except OSError:
                            return
                        time.sleep(0.3)
                    return
                if me.mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", "/elsewhere")
                elif me.mode == "error":
                    self.send_response(500, "Internal secret-db-7 exploded")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def listener() -> Iterator[Listener]:
    ls = Listener()
    yield ls
    ls.server.shutdown()
    ls.server.server_close()


LOCAL = EgressPolicy.parse(["127.0.0.0/8"])


def test_a_refused_destination_gets_no_request_and_an_allowed_one_does(listener: Listener) -> None:
    url = f"http://127.0.0.1:{listener.port}/hook"
    a = post(NONE, url, b"{}", {}, 5.0)
    assert (a.status, a.refused, a.tenant_error) == (None, True, TENANT_REFUSED) and listener.hits == []
    b = post(LOCAL, url, b"{}", {}, 5.0)
    assert (b.status, b.tenant_error) == (200, None) and listener.hits == ["/hook"]


def test_a_name_resolving_to_loopback_when_the_request_is_made_is_not_called(listener: Listener) -> None:
    NONE.check_url(f"http://rebind.example:{listener.port}/")  # a name: not resolved at creation
    a = post(NONE, f"http://rebind.example:{listener.port}/hook", b"{}", {}, 5.0,
             resolver=lambda host, port: ["127.0.0.1"])
    assert a.refused and "127.0.0.1" in (a.detail or "") and listener.hits == []
    mixed = post(NONE, f"http://rebind.example:{listener.port}/hook", b"{}", {}, 5.0,
                 resolver=lambda host, port: ["93.184.216.34", "127.0.0.1"])
    assert mixed.refused and listener.hits == [], "one refused address refuses the name"


def test_the_connection_goes_to_the_address_that_was_checked(listener: Listener) -> None:
    calls: list[str] = []

    def resolver(host: str, port: int) -> list[str]:  # a rebinding resolver: loopback only after the check
        calls.append(host)
        return ["127.0.0.1"] if len(calls) == 1 else ["10.9.9.9"]

    allow = EgressPolicy.parse(["127.0.0.0/8"])
    a = post(allow, f"http://rebind.example:{listener.port}/hook", b"{}", {}, 5.0, resolver=resolver)
    assert a.status == 200 and calls == ["rebind.example"] and listener.hits == ["/hook"]


def test_a_machine_name_resolving_to_loopback_is_refused_by_the_system_resolver(listener: Listener) -> None:
    name = socket.gethostname()
    if socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)[0][4][0] != "127.0.0.1":
        pytest.skip(f"{name} does not resolve to 127.0.0.1 here")
    a = post(NONE, f"http://{name}:{listener.port}/hook", b"{}", {}, 5.0)
    assert a.refused and listener.hits == []
    assert post(LOCAL, f"http://{name}:{listener.port}/hook", b"{}", {}, 5.0).status == 200


def test_a_trickling_receiver_is_cut_at_the_total_deadline(listener: Listener) -> None:
    listener.mode = "trickle"  # ~11 s for its whole answer, one byte every 0.3 s: no read ever times out
    t0 = time.monotonic()  # noqa: TID251 - real I/O is what is measured
    a = post(LOCAL, f"http://127.0.0.1:{listener.port}/hook", b"{}", {}, 1.0)
    took = time.monotonic() - t0  # noqa: TID251
    assert a.status is None and a.tenant_error == TENANT_FAILED and took < 1.5, took


def test_a_redirect_is_the_receivers_answer_and_is_not_followed(listener: Listener) -> None:
    listener.mode = "redirect"
    a = post(LOCAL, f"http://127.0.0.1:{listener.port}/hook", b"{}", {}, 5.0)
    assert a.status == 302 and a.tenant_error == TENANT_FAILED and listener.hits == ["/hook"]


def test_what_a_tenant_sees_of_a_failure_carries_no_detail_of_the_receiver(listener: Listener) -> None:
    listener.mode = "error"
    a = post(LOCAL, f"http://127.0.0.1:{listener.port}/hook", b"{}", {}, 5.0)
    assert a.status == 500 and a.tenant_error == TENANT_FAILED and "secret-db-7" in (a.detail or "")
    listener.server.shutdown()
    listener.server.server_close()
    gone = post(LOCAL, f"http://127.0.0.1:{listener.port}/hook", b"{}", {}, 5.0)
    assert gone.status is None and gone.tenant_error == TENANT_FAILED and "Connection" in (gone.detail or "")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_tls_goes_to_the_checked_address_and_verifies_the_certificate_against_the_host_name(
        tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    ls = Listener()
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    ls.server.socket = server_tls.wrap_socket(ls.server.socket, server_side=True)
    client_tls = ssl.create_default_context(cafile=str(cert))
    allow = EgressPolicy.parse(LOOPBACK)
    try:
        by_name = post(allow, f"https://localhost:{ls.port}/hook", b"{}", {}, 5.0, tls=client_tls)
        assert by_name.status == 200  # connected to 127.0.0.1, verified as "localhost" (SNI)
        by_address = post(allow, f"https://127.0.0.1:{ls.port}/hook", b"{}", {}, 5.0, tls=client_tls)
        assert by_address.status is None and "mismatch" in (by_address.detail or "")
        untrusted = post(allow, f"https://localhost:{ls.port}/hook", b"{}", {}, 5.0)
        assert untrusted.status is None and "CERTIFICATE_VERIFY_FAILED" in (untrusted.detail or "")
        assert ls.hits == ["/hook"]
    finally:
        ls.server.shutdown()
        ls.server.server_close()
