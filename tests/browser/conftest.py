"""Browser tests of the console: a real headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium) against a real `cronwheel console` process in front of a
real cluster (tests/e2e/api_cluster.py: PostgreSQL, etcd, node processes, an auth file).

Without chromium the tests are skipped on a developer's machine and FAIL in CI (CI=true):
`.ci/run` installs it, so a CI run that cannot find it is broken, not excused.

Screenshots of every page the tests visit go to $CRONWHEEL_ARTIFACTS/console (default
artifacts/console/ at the repository root, gitignored), named after the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cronwheel.devtools.localservers import die_with_parent, free_port
from tests.e2e.api_cluster import TOKENS, api_cluster
from tests.e2e.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("CRONWHEEL_ARTIFACTS", ROOT / "artifacts")) / "console"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = [pytest.mark.e2e]


def _require_chromium() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if not missing:
        return
    why = f"headless Chromium is missing ({', '.join(missing)}): apt-get install -y chromium chromium-driver"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run the browser tests: {why}")
    pytest.skip(why)


@dataclass
class ConsoleProc:
    url: str
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _pump: threading.Thread | None = None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._pump is not None:
            self._pump.join(10)  # its `with` closes the pipe


def start_console(address: str, *extra: str, token: str | None = None) -> ConsoleProc:
    """`cronwheel console` as a process; returns once it printed its URL."""
    port = free_port()
    args = [sys.executable, "-m", "cronwheel", "console", "--address", address, "--listen", f"127.0.0.1:{port}", *extra]
    if token is not None:
        tf = Path(tempfile.mkdtemp(prefix="console-tok-")) / "token"
        tf.write_text(token)
        args += ["--token-file", str(tf)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, preexec_fn=die_with_parent())
    c = ConsoleProc("", proc)
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                c.lines.append(line.rstrip("\n"))
                if line.startswith("console listening on "):
                    c.url = line.split(" on ", 1)[1].strip().rstrip("/")
                    ready.set()

    c._pump = threading.Thread(target=pump, daemon=True)
    c._pump.start()
    if not ready.wait(30):
        c.stop()
        raise RuntimeError(f"console did not start: {c.lines[-30:]}")
    return c


@pytest.fixture(scope="session")
def cluster() -> Iterator[tuple[Any, str]]:
    """One cluster with auth (tokens: tests/e2e/api_cluster.TOKENS) for the browser tests."""
    _require_chromium()
    with api_cluster(partitions=8) as (c, address):
        yield c, address


@pytest.fixture(scope="session")
def console(cluster: tuple[Any, str]) -> Iterator[ConsoleProc]:
    c = start_console(cluster[1], token=TOKENS["admin"][0])
    yield c
    c.stop()


class Browser:
    """A Selenium Chrome driver with the few helpers the tests use."""

    def __init__(self, driver: Any, base: str, name: str) -> None:
        self.d = driver
        self.base = base
        self.name = name
        self.shots = 0

    def go(self, path: str) -> None:
        self.d.get(self.base + path)

    def css(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.d.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.d.find_elements(By.CSS_SELECTOR, selector))

    def text(self, selector: str = "body") -> str:
        return str(self.css(selector).text)

    def has(self, selector: str) -> bool:
        return bool(self.all(selector))

    def fill(self, selector: str, value: str) -> None:
        el = self.css(selector)
        el.clear()
        el.send_keys(value)

    def click(self, selector: str) -> None:
        """Click; for a link or a button (which load a page), wait until the new page replaced
        the old one."""
        el = self.css(selector)
        navigates = el.tag_name in ("a", "button")
        old = self.css("html")
        el.click()
        if navigates:
            def replaced() -> bool:
                try:
                    old.tag_name  # noqa: B018 - raises once the old page is gone
                    return False
                except Exception:
                    return self.d.execute_script("return document.readyState") == "complete"

            wait_until(replaced, 20, f"the page after clicking {selector}", interval_s=0.05)

    def wait_text(self, text: str, timeout: float = 20, selector: str = "body", reload: bool = False) -> str:
        def seen() -> str | None:
            if reload:
                self.d.refresh()
            try:
                got = self.text(selector)
            except Exception:  # the element is being swapped by htmx: look again
                return None
            return got if text in got else None

        return wait_until(seen, timeout, f"{text!r} in {selector}", interval_s=0.3,
                          detail=lambda: self.text("body")[:2000])

    def login(self, who: str) -> None:
        self.go("/login")
        self.fill("#token", TOKENS[who][0])
        self.click("#login")
        wait_until(lambda: "/login" not in self.d.current_url, 20, "the login to finish",
                   detail=lambda: self.text("body")[:500])

    def shot(self, label: str) -> Path:
        """Save a screenshot (artifacts/console/<test>-<n>-<label>.png)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.shots += 1
        path = ARTIFACTS / f"{self.name}-{self.shots:02d}-{label}.png"
        height = self.d.execute_script("return Math.min(document.body.scrollHeight, 4000)")
        width = self.d.get_window_size()["width"]
        self.d.set_window_size(width, max(int(height) + 40, 600))
        self.d.save_screenshot(str(path))
        return path

    def cookies(self) -> list[dict[str, Any]]:
        return list(self.d.get_cookies())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]


def make_driver(width: int = 1280, height: int = 900) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="chromium-")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    driver._cw_profile = profile  # noqa: SLF001 - removed at teardown
    return driver


@pytest.fixture
def browser(request: pytest.FixtureRequest, console: ConsoleProc) -> Iterator[Browser]:
    _require_chromium()
    driver = make_driver()
    b = Browser(driver, console.url, request.node.name.removeprefix("test_"))
    try:
        yield b
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:  # what the page showed when the test failed
            b.shot("FAILED")
            (ARTIFACTS / f"{b.name}-FAILED.html").write_text(driver.page_source)
    finally:
        driver.quit()
        shutil.rmtree(driver._cw_profile, ignore_errors=True)  # noqa: SLF001
