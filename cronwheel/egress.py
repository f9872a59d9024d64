"""The egress check: where a cronwheel process may send an outbound request (webhooks now, the
HTTP targets next). One policy, used twice per request, and one POST that obeys it.

Refused unless the operator allowed them (`--egress-allow HOST_OR_CIDR`, repeatable): every
address that is not globally routable, which covers the classes that reach the operator's own
side of the network — loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16 with the cloud
metadata address, fe80::/10), private (10/8, 172.16/12, 192.168/16), shared (100.64/10),
unique-local (fc00::/7), unspecified (0.0.0.0, ::) — plus multicast. An IPv4-mapped or
IPv4-compatible IPv6 address is judged as the IPv4 address inside it, and a legacy IPv4 spelling
(`2130706433`, `0x7f.1`, `127.1`) as the address the resolver makes of it.

Two checks, one rule (`EgressPolicy.refusal`):
- `check_url`, when a URL is stored: literal addresses and the names `localhost` / `*.localhost`
  only. Other names are not resolved then (what a name resolves to may change by send time).
- `resolve`, when the connection is made: the name is resolved (`socket.getaddrinfo`), every
  address it resolves to is checked, and `post` connects to the checked address itself, so a
  second resolution cannot swap it (DNS rebinding). TLS still verifies the certificate against
  the host name (SNI), not against the address.

`post` makes one POST with a total deadline (every socket read and write gets the time that
remains, so a receiver trickling bytes cannot hold it longer), never follows a redirect (a 3xx is
the receiver's answer), and ignores proxy environment variables (a proxy would connect where the
check did not look). Its `Answer` keeps the status code for the caller and the detail (the
connection error, the reason phrase) for the node's log only: what a tenant sees is
`TENANT_REFUSED` or `TENANT_FAILED`.

Pure but for `resolve` and `post`; the policy is a frozen value, safe to share between threads.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cronwheel.clock import monotonic
from cronwheel.errors import InvalidArgument

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]  # host, port -> the addresses it resolves to

FLAG = "--egress-allow"
TENANT_REFUSED = "refused by egress policy"
TENANT_FAILED = "delivery failed"
LOOPBACK = ("127.0.0.0/8", "::1/128", "localhost")  # what `cronwheel dev` and local tests allow
MAX_ANSWER_BYTES = 65536  # read of an answer's body, then the connection is dropped


class EgressRefused(Exception):
    """The policy refuses this destination; the message is for the node's log."""


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """Which non-global destinations the operator allowed: networks, and host names (exact,
    case-insensitive) that may resolve to anything."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str], flag: str = FLAG) -> EgressPolicy:
        """From `--egress-allow` values: an address, a CIDR or a host name each."""
        nets: list[IPNetwork] = []
        hosts: list[str] = []
        for raw in entries:
            v = raw.strip()
            if not v:
                raise InvalidArgument(flag, "an empty value; give a host name, an address or a CIDR")
            try:
                nets.append(ipaddress.ip_network(v, strict=False))
                continue
            except ValueError:
                pass
            name = _host_key(v)
            if "/" in v or not all(c.isalnum() or c in "-." for c in name) or not name:
                raise InvalidArgument(flag, f"{raw!r} is neither a host name, an address nor a CIDR")
            hosts.append(name)
        return cls(tuple(dict.fromkeys(nets)), tuple(dict.fromkeys(hosts)))

    def describe(self) -> tuple[str, ...]:
        """The list as a node reports it: normalized and sorted, so equal lists compare equal."""
        return tuple(sorted({str(n) for n in self.networks} | set(self.hosts)))

    def refusal(self, host: str, address: IPAddress | None) -> str | None:
        """Why `host` (resolved to `address`, None if not resolved) is refused; None if allowed."""
        if _host_key(host) in self.hosts:
            return None
        if address is None:
            return f"{host} is a local name" if _is_local_name(host) else None
        inner = _inner_v4(address)
        if any(inner in n or address in n for n in self.networks):
            return None
        if inner.is_global and not inner.is_multicast:
            return None
        where = "" if _host_key(host) == str(inner) else f" ({inner})"
        return f"{host} is {_class_of(inner)} address{where}"

    def check_url(self, url: str, field: str = "url") -> None:
        """At creation: refuse a URL whose host is a refused literal address or a local name."""
        host = urllib.parse.urlsplit(url).hostname or ""
        why = self.refusal(host, literal_address(host))
        if why is not None:
            raise InvalidArgument(field, f"{TENANT_REFUSED}: {why} (an operator may allow it with {FLAG})")

    def resolve(self, host: str, port: int, resolver: Resolver | None = None) -> str:
        """At connection time: the address to connect to. Every address `host` resolves to must
        be allowed (a name that resolves into a refused class is refused, whatever else it has)."""
        literal = literal_address(host)
        if literal is not None:
            addresses = [str(literal)]
        else:
            why = self.refusal(host, None)
            if why is not None:
                raise EgressRefused(why)
            addresses = list((resolver or system_resolver)(host, port))
        if not addresses:
            raise OSError(f"{host} resolved to no address")
        for a in addresses:
            why = self.refusal(host, ipaddress.ip_address(a.split("%", 1)[0]))
            if why is not None:
                raise EgressRefused(why)
        return addresses[0]


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def literal_address(host: str) -> IPAddress | None:
    """The address a host spells literally (also `127.1`, `0x7f000001`, `2130706433`); else None."""
    h = host.strip("[]")
    try:
        return ipaddress.ip_address(h.split("%", 1)[0])
    except ValueError:
        pass
    if h and all(c in "0123456789abcdefxABCDEFX." for c in h) and h[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(h))
        except OSError:
            return None
    return None


def _host_key(host: str) -> str:
    return host.strip().strip("[]").lower().rstrip(".")


def _is_local_name(host: str) -> bool:
    h = _host_key(host)
    return h in ("localhost", "ip6-localhost", "ip6-loopback") or h.endswith(".localhost")


def _inner_v4(a: IPAddress) -> IPAddress:
    if isinstance(a, ipaddress.IPv6Address):
        if a.ipv4_mapped is not None:
            return a.ipv4_mapped
        if int(a) >> 32 == 0 and int(a) > 1:  # IPv4-compatible ::a.b.c.d (deprecated)
            return ipaddress.IPv4Address(int(a) & 0xFFFFFFFF)
    return a


def _class_of(a: IPAddress) -> str:
    if a.is_unspecified:
        return "an unspecified"
    if a.is_loopback:
        return "a loopback"
    if a.is_link_local:
        return "a link-local"
    if isinstance(a, ipaddress.IPv6Address) and a in ipaddress.IPv6Network("fc00::/7"):
        return "a unique-local"
    if a.is_multicast:
        return "a multicast"
    if a.is_private:
        return "a private"
    return "a non-global"


@dataclass(frozen=True, slots=True)
class Answer:
    """The outcome of one POST. `status` None: no HTTP answer. `detail` is for the node's log
    (never shown to a tenant); `refused`: the policy refused the destination, nothing was sent."""

    status: int | None
    detail: str | None = None
    refused: bool = False
    body: bytes = b""  # the start of the answer's body (at most MAX_ANSWER_BYTES)
    retry_after: str | None = None  # the answer's Retry-After header (HTTP targets)

    @property
    def tenant_error(self) -> str | None:
        """What the tenant may see of a failed attempt: no connection error, no reason phrase."""
        if self.refused:
            return TENANT_REFUSED
        if self.status is not None and 200 <= self.status < 300:
            return None
        return TENANT_FAILED


def post(policy: EgressPolicy, url: str, body: bytes, headers: Mapping[str, str], total_s: float,
         resolver: Resolver | None = None, tls: ssl.SSLContext | None = None, method: str = "POST") -> Answer:
    """POST (or `method`) `body` to `url` within `total_s` seconds in all (blocking: run it on a thread).
    `tls`: the context of https:// (default: the system's trust store, host names verified);
    its `sslsocket_class` is replaced by one that keeps the deadline."""
    deadline = monotonic() + total_s
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        address = policy.resolve(host, port, resolver)
    except EgressRefused as exc:
        return Answer(None, str(exc), refused=True)
    except (OSError, ValueError) as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}"[:500])
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    conn = _Connection(host, port, address, deadline, (tls or _TLS) if parts.scheme == "https" else None)
    try:
        conn.request(method, target, body=body, headers={**headers, "Host": parts.netloc.rsplit("@", 1)[-1]})
        resp = conn.getresponse()
        got = resp.read(MAX_ANSWER_BYTES)
        return Answer(int(resp.status), None if 200 <= resp.status < 300 else f"HTTP {resp.status} {resp.reason}"[:500],
                      body=got, retry_after=resp.getheader("Retry-After"))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}"[:500])
    finally:
        conn.close()


def _remaining(deadline: float) -> float:
    left = deadline - monotonic()
    if left <= 0:
        raise TimeoutError("the request's total deadline passed")
    return left


class _DeadlineSocket(socket.socket):
    """Every blocking call waits at most what remains of the request's deadline."""

    deadline: float = 0.0

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self.settimeout(_remaining(self.deadline))
        return super().recv_into(buffer, nbytes, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.settimeout(_remaining(self.deadline))
        super().sendall(data, flags)


class _DeadlineSSLSocket(ssl.SSLSocket):
    deadline: float = 0.0

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        self.settimeout(_remaining(self.deadline))
        return super().recv_into(buffer, nbytes, flags)  # type: ignore[arg-type]

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.settimeout(_remaining(self.deadline))
        super().sendall(data, flags)

    def do_handshake(self, block: bool = False) -> None:
        self.settimeout(_remaining(self.deadline))
        super().do_handshake(block)


_TLS = ssl.create_default_context()


class _Connection(http.client.HTTPConnection):
    """An HTTP(S) connection to the checked `address`, named `host` for Host and TLS (SNI and
    certificate verification), every socket call bounded by `deadline`."""

    def __init__(self, host: str, port: int, address: str, deadline: float, tls: ssl.SSLContext | None) -> None:
        super().__init__(host, port, timeout=max(0.001, deadline - monotonic()))
        self.address, self.deadline, self.tls = address, deadline, tls

    def connect(self) -> None:
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        sock: socket.socket = _DeadlineSocket(family, socket.SOCK_STREAM)
        sock.deadline = self.deadline  # type: ignore[attr-defined]
        try:
            sock.settimeout(_remaining(self.deadline))
            sock.connect((self.address, self.port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                self.tls.sslsocket_class = _DeadlineSSLSocket
                sock = self.tls.wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False)
                sock.deadline = self.deadline  # type: ignore[attr-defined]
                sock.do_handshake()
            self.sock = sock
        except BaseException:
            sock.close()  # the TLS socket once wrapped: it owns the descriptor then
            raise
