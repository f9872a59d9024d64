"""The destinations the egress check refuses (cronwheel/egress.py), one per address class and
spelling, shared by every test of a surface that sends (webhooks now; HTTP targets next: add the
surface to the e2e test's parametrisation, not a second table)."""

from __future__ import annotations

# (class, host as written in a URL). Each is refused unless --egress-allow names it.
REFUSED_HOSTS: tuple[tuple[str, str], ...] = (
    ("loopback", "127.0.0.1"),
    ("loopback", "127.8.9.10"),
    ("loopback", "[::1]"),
    ("loopback", "localhost"),
    ("loopback", "LocalHost."),
    ("loopback", "api.localhost"),
    ("loopback", "2130706433"),  # 127.0.0.1 as one decimal number
    ("loopback", "0x7f.1"),
    ("loopback", "[::ffff:127.0.0.1]"),  # IPv4-mapped IPv6
    ("link-local", "169.254.169.254"),  # the cloud metadata service
    ("link-local", "[fe80::1]"),
    ("private", "10.0.0.1"),
    ("private", "172.16.5.4"),
    ("private", "192.168.1.1"),
    ("private", "[::ffff:10.0.0.1]"),
    ("shared", "100.64.0.1"),
    ("unique-local", "[fc00::1]"),
    ("unique-local", "[fd12:3456::1]"),
    ("unspecified", "0.0.0.0"),
    ("unspecified", "[::]"),
    ("multicast", "224.0.0.1"),
)

ALLOWED_HOSTS = ("93.184.216.34", "[2606:2800:220:1:248:1893:25c8:1946]", "hooks.example.com")
