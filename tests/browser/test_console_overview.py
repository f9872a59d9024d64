"""The console's Overview (admins) and what happens to sessions, in a real headless Chromium:
an admin sees the partitions move to the surviving node after a node is killed (the page
refreshes itself); a token the cluster stops accepting sends the person back to the login page;
dev mode (`--no-login`) says so on every page. Its own two-node cluster, since it kills nodes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from cronwheel.devtools.harness import ProcessCluster
from tests.browser.conftest import Browser, ConsoleProc, _require_chromium, make_driver, start_console
from tests.e2e.api_cluster import TOKENS, write_auth_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[tuple[ProcessCluster, ConsoleProc]]:
    _require_chromium()
    with ProcessCluster(partitions=8, lease_ttl_s=3) as c:
        auth = write_auth_file(c.workdir / "auth.json")
        n1 = c.start_node("n1", "--auth-file", str(auth))
        n2 = c.start_node("n2", "--auth-file", str(auth))
        c.wait_converged(["n1", "n2"])
        console = start_console(f"{n1.address},{n2.address}", token=TOKENS["admin"][0])
        try:
            yield c, console
        finally:
            console.stop()


@pytest.fixture
def b2(request: pytest.FixtureRequest, two_nodes: tuple[ProcessCluster, ConsoleProc]) -> Iterator[Browser]:
    driver = make_driver()
    b = Browser(driver, two_nodes[1].url, request.node.name.removeprefix("test_"))
    try:
        yield b
    finally:
        driver.quit()


def _owners(b: Browser) -> dict[str, int]:
    return {el.get_attribute("data-owner"): len(el.find_elements("css selector", "tr[data-partition]"))
            for el in b.all("#partitions .owner")}


def _epochs(b: Browser) -> dict[str, int]:
    return {r.get_attribute("data-partition"): int(r.find_elements("css selector", "td")[1].text)
            for r in b.all("#partitions tr[data-partition]")}


def test_an_admin_sees_the_partitions_move_after_a_node_is_killed(
        two_nodes: tuple[ProcessCluster, ConsoleProc], b2: Browser) -> None:
    c, _ = two_nodes
    b2.login("admin")
    assert b2.d.current_url.endswith("/overview")
    owners = _owners(b2)
    assert set(owners) == {"n1", "n2"} and sum(owners.values()) == 8
    assert len(b2.all("#nodes tr[data-node]")) == 2
    before = _epochs(b2)
    b2.shot("overview-two-nodes")
    c.kill_node("n2")
    # the page polls /overview/live: no reload; n1 takes over n2's partitions when its lease lapses
    b2.wait_text("n1 (8)", selector="#partitions", timeout=45)
    assert _owners(b2) == {"n1": 8}
    after = _epochs(b2)
    moved = [p for p in after if after[p] > before[p]]
    assert len(moved) == owners["n2"]  # each moved partition has a new epoch
    b2.shot("overview-after-kill")
    assert "fire lag" in b2.d.page_source and b2.has("svg.chart")


def test_a_token_the_cluster_stops_accepting_sends_the_person_back_to_login(
        two_nodes: tuple[ProcessCluster, ConsoleProc], b2: Browser) -> None:
    c, _ = two_nodes
    b2.login("fuzz")
    b2.go("/schedules")
    assert "tenant" in b2.text("#who")
    # revoke: the auth file without the fuzz token, and the live node restarted on it
    auth = c.workdir / "auth.json"
    doc = json.loads(auth.read_text())
    auth.write_text(json.dumps({"tokens": [t for t in doc["tokens"] if t.get("tenant") != "fuzz"]}))
    live = [n for n in c.live_nodes() if n.startswith("n")]
    for name in live:
        address = c.nodes[name].address
        c.stop_node(name)
        c.start_node(name, "--auth-file", str(auth), "--listen", address)
    b2.wait_text("Log in", selector="h1", reload=True, timeout=30)
    assert "no longer accepts" in b2.text("#notice")
    b2.shot("session-expired")
    assert not [ck for ck in b2.cookies() if ck["name"] == "cw_session"]


def test_dev_mode_without_login_says_so_on_every_page(two_nodes: tuple[ProcessCluster, ConsoleProc]) -> None:
    c, _ = two_nodes
    address = next(c.nodes[n].address for n in c.live_nodes() if n.startswith("n"))
    dev = start_console(address, "--no-login", token=TOKENS["admin"][0])
    driver = make_driver()
    b = Browser(driver, dev.url, "dev_mode")
    try:
        for path in ("/", "/schedules", "/executions", "/schedules/new", "/login"):
            b.go(path)
            assert "Dev mode: no login" in b.text("#devmode"), path
            assert "/login" not in b.d.current_url
        b.shot("dev-mode")
        assert re.search(r"dev mode", b.text("#who"))
    finally:
        driver.quit()
        dev.stop()
