"""The console's login, Schedules and Schedule pages, in a real headless Chromium against a real
cluster with auth: tenancy through the person's token, the session cookie's flags, CSRF, the
list's search / filters / sort / pages / bulk actions, creating a schedule and its next fire
times, the timeline of ticks (a tick appearing after it fires; paused ticks explained), and bad
input shown next to its field with nothing stored."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.v1 import common_pb2
from cronwheel.v1 import scheduler_pb2 as S
from tests.browser.conftest import Browser, ConsoleProc
from tests.e2e.api_cluster import TOKENS, Api
from tests.e2e.helpers import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _names(b: Browser) -> list[str]:
    return [a.text for a in b.all("#schedules a.sname")]


def _tag() -> str:
    return uuid.uuid4().hex[:6]


def test_a_tenant_token_sees_only_its_tenants_schedules(cluster: tuple[Any, str], browser: Browser) -> None:
    _, address = cluster
    tag = _tag()
    Api(address, "acme").create(name=f"acme-report-{tag}")
    Api(address, "globex").create(name=f"globex-billing-{tag}")
    browser.login("acme")
    browser.go(f"/schedules?q={tag}")
    assert _names(browser) == [f"acme-report-{tag}"]
    assert "tenant acme" in browser.text("#who")
    assert "Overview" not in browser.text("header")  # the cluster is an admin's page
    browser.shot("tenant-schedules")
    browser.go("/overview")
    assert "Admins only" in browser.text("h1")
    # the token is nowhere the browser keeps: not in a URL, a page or a cookie
    assert TOKENS["acme"][0] not in browser.d.page_source + browser.d.current_url
    cookies = {c["name"]: c for c in browser.cookies()}
    assert set(cookies) == {"cw_session"}
    assert cookies["cw_session"]["httpOnly"] and cookies["cw_session"]["sameSite"] == "Strict"
    assert TOKENS["acme"][0] not in cookies["cw_session"]["value"]


def test_an_admin_sees_every_tenant_and_filters_by_tenant(cluster: tuple[Any, str], browser: Browser) -> None:
    _, address = cluster
    tag = _tag()
    Api(address, "acme").create(name=f"a-{tag}")
    Api(address, "globex").create(name=f"g-{tag}")
    browser.login("admin")
    browser.go(f"/schedules?q={tag}&sort=name")
    assert _names(browser) == [f"a-{tag}", f"g-{tag}"]
    browser.fill("#tenant", "globex")
    browser.click("#apply-filters")
    browser.wait_text("globex", selector="#schedules")
    assert _names(browser) == [f"g-{tag}"]


def test_a_wrong_token_stays_on_the_login_page_and_no_session_means_login(browser: Browser) -> None:
    browser.go("/schedules")
    assert browser.d.current_url.endswith("/login")
    browser.fill("#token", "tok-not-a-real-token")
    browser.click("#login")
    assert "refused this token" in browser.text("#token-error")
    browser.shot("login-refused")
    assert [c["name"] for c in browser.cookies()] == ["cw_login"]


def test_search_sort_and_pages_walk_the_list_with_page_tokens(cluster: tuple[Any, str], browser: Browser) -> None:
    _, address = cluster
    tag = _tag()
    globex = Api(address, "globex")
    made = [globex.create(name=f"pg-{tag}-{i:02d}", job_type=f"jt-{tag}").name for i in (list(range(30)))[::-1]]
    browser.login("globex")
    browser.go(f"/schedules?q=pg-{tag}&size=25")
    first = _names(browser)
    assert first == made[:25]  # creation order by default
    browser.click("#sort-name")
    assert _names(browser) == sorted(made)[:25]
    browser.click("#next-page")
    assert _names(browser) == sorted(made)[25:]
    assert not browser.has("#next-page")
    browser.shot("schedules-page-2")
    browser.click("#prev-page")
    assert _names(browser) == sorted(made)[:25]
    browser.go(f"/schedules?job_type=jt-{tag}&q=-2")
    assert sorted(_names(browser)) == sorted(n for n in made if "-2" in n)


def test_bulk_pause_and_resume_act_on_the_selected_schedules(cluster: tuple[Any, str], browser: Browser) -> None:
    _, address = cluster
    tag = _tag()
    acme = Api(address, "acme")
    ids = [acme.create(name=f"bulk-{tag}-{i}").id for i in range(3)]
    browser.login("acme")
    browser.go(f"/schedules?q=bulk-{tag}")
    browser.click("#select-all")
    browser.click("#bulk-pause")
    assert "Paused 3 of 3 schedules." in browser.text(".flash")
    assert all(acme.call("GetSchedule", S.GetScheduleRequest(schedule_id=i)).schedule.paused for i in ids)
    browser.go(f"/schedules?q=bulk-{tag}&state=paused")
    assert len(_names(browser)) == 3
    browser.shot("bulk-paused")
    browser.click("#select-all")
    browser.click("#bulk-resume")
    assert "Resumed 3 of 3 schedules." in browser.text(".flash")
    assert not any(acme.call("GetSchedule", S.GetScheduleRequest(schedule_id=i)).schedule.paused for i in ids)
    browser.go(f"/schedules?q=bulk-{tag}")
    browser.click("#select-all")
    browser.click("#bulk-trigger")
    assert "Triggered 3 of 3 schedules." in browser.text(".flash")
    for i in ids:
        runs = acme.call("ListExecutions", S.ListExecutionsRequest(schedule_id=i)).executions
        assert len(runs) == 1 and runs[0].trigger == common_pb2.TRIGGER_MANUAL


def test_creating_a_schedule_shows_its_next_fire_times_with_dst_notes(browser: Browser) -> None:
    tag = _tag()
    browser.login("acme")
    browser.go("/schedules")
    browser.click("#new-schedule")
    browser.shot("new-schedule-form")
    browser.fill("#name", f"london-0130-{tag}")
    browser.fill("#cron", "30 1 * * *")  # 01:30 does not exist on the spring-forward day in London
    browser.fill("#timezone", "Europe/London")
    browser.fill("#job_type", "report")
    browser.fill("#payload", '{"to": "ops"}')
    browser.click("#save")
    browser.wait_text(f"london-0130-{tag}", selector="#schedule-name")
    assert "Created schedule" in browser.text(".flash")
    fires = browser.all("#next-fires li")
    assert len(fires) == 10 and all("UTC" in f.text for f in fires)
    browser.d.get(browser.d.current_url.split("?")[0] + "?n=200")  # far enough to reach the next spring-forward
    assert "DST:" in browser.text("#next-fires")
    browser.shot("schedule-next-fires")


def test_bad_input_shows_the_apis_message_next_to_the_field_and_stores_nothing(
        cluster: tuple[Any, str], browser: Browser) -> None:
    _, address = cluster
    tag = _tag()
    browser.login("acme")
    browser.go("/schedules/new")
    browser.fill("#name", f"bad-{tag}")
    browser.fill("#cron", "61 * * * *")
    browser.fill("#job_type", "x")
    browser.click("#save")
    assert "minute" in browser.text("#cron-error").lower() or "61" in browser.text("#cron-error")
    assert browser.css("#cron").get_attribute("aria-invalid") == "true"
    assert browser.css("#name").get_attribute("value") == f"bad-{tag}"  # what was typed is kept
    browser.shot("bad-cron")
    browser.fill("#cron", "0 3 * * *")
    browser.fill("#timezone", "Mars/Olympus")
    browser.click("#save")
    assert browser.text("#timezone-error")
    browser.fill("#timezone", "UTC")
    browser.fill("#payload", "{not json")
    browser.click("#save")
    assert "not JSON" in browser.text("#payload-error")
    acme = Api(address, "acme")
    names = [s.name for s in acme.call("ListSchedules", S.ListSchedulesRequest(page_size=1000)).schedules]
    assert f"bad-{tag}" not in names


def _post(console: ConsoleProc, path: str, data: bytes, cookie: str) -> int:
    req = urllib.request.Request(console.url + path, data=data, method="POST",
                                 headers={"Cookie": f"cw_session={cookie}",
                                          "Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_post_without_the_csrf_token_is_refused(cluster: tuple[Any, str], console: ConsoleProc,
                                                  browser: Browser) -> None:
    _, address = cluster
    acme = Api(address, "acme")
    sid = acme.create(name=f"csrf-{_tag()}").id
    browser.login("acme")
    cookie = next(c["value"] for c in browser.cookies() if c["name"] == "cw_session")
    assert _post(console, f"/schedules/{sid}/pause", b"", cookie) == 403
    assert _post(console, f"/schedules/{sid}/pause", b"csrf=forged", cookie) == 403
    assert not acme.call("GetSchedule", S.GetScheduleRequest(schedule_id=sid)).schedule.paused
    # and from the page itself (same session) the form's token works
    browser.go(f"/schedules/{sid}")
    browser.click("#pause")
    assert "Paused" in browser.text(".flash")
    assert acme.call("GetSchedule", S.GetScheduleRequest(schedule_id=sid)).schedule.paused


def test_a_tick_appears_on_the_timeline_after_it_fires_and_paused_ticks_are_explained(
        cluster: tuple[Any, str], browser: Browser) -> None:
    _, address = cluster
    acme = Api(address, "acme")
    sid = acme.create(name=f"every-2s-{_tag()}", cron="*/2 * * * * *").id
    browser.login("acme")
    browser.go(f"/schedules/{sid}?window=10m")
    browser.wait_text("fired", selector="#timeline", timeout=30)  # htmx polls the timeline: no reload
    fired = browser.all('#timeline li[data-outcome="fired"]')
    assert fired and fired[0].find_element("css selector", "a.exec").get_attribute("href")
    assert fired[0].get_attribute("title")  # the reason, on hover
    browser.shot("timeline-fired")
    browser.click("#pause")
    assert "Paused" in browser.text(".flash")
    browser.wait_text("paused", selector='#timeline li[data-outcome="paused"]', timeout=30)
    tick = browser.css('#timeline li[data-outcome="paused"]')
    assert "‖" in tick.text and "paused" in tick.text  # readable without colour
    browser.shot("timeline-paused")
    # the link of a fired tick opens its execution
    browser.css('#timeline li[data-outcome="fired"] a.exec').click()
    wait_until(lambda: "/executions/" in browser.d.current_url, 10, "the execution page")
    assert browser.has("#fencing-token")



def test_the_pages_fit_a_phone_width(cluster: tuple[Any, str], browser: Browser) -> None:
    _, address = cluster
    sid = Api(address, "acme").create(name=f"phone-{_tag()}", cron="*/5 * * * * *").id
    browser.d.set_window_size(390, 844)
    browser.login("acme")
    for path, label in (("/schedules", "phone-schedules"), (f"/schedules/{sid}", "phone-schedule"),
                        ("/executions", "phone-executions")):
        browser.go(path)
        width = browser.d.execute_script("return document.documentElement.scrollWidth")
        assert width <= 400, (path, width)  # wide tables scroll inside their box, the page does not
        browser.shot(label)
        browser.d.set_window_size(390, 844)


def test_backfill_previews_the_ticks_it_will_create_then_runs_them(cluster: tuple[Any, str], browser: Browser) -> None:
    _, address = cluster
    acme = Api(address, "acme")
    sid = acme.create(name=f"hourly-{_tag()}", cron="0 * * * *").id
    browser.login("acme")
    browser.go(f"/schedules/{sid}/backfill?start=2026-01-01T03:00&end=2026-01-01T01:00")
    assert "must be after start_time" in browser.text("#start-error")  # the message, next to the field
    soon = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)  # noqa: TID251 - the test's wall clock
    browser.go(f"/schedules/{sid}/backfill?start={soon - timedelta(hours=2):%Y-%m-%dT%H:%M}"
               f"&end={soon + timedelta(hours=2):%Y-%m-%dT%H:%M}")
    browser.click("#run-backfill")  # the preview shows the range; the backfill itself refuses a future end
    assert "future" in browser.text("#end-error")
    browser.go(f"/schedules/{sid}")
    browser.click("#backfill")
    day = (soon - timedelta(days=3)).strftime("%Y-%m-%d")  # within the 30 days of records explain keeps
    browser.d.execute_script(f"document.getElementById('start').value = '{day}T00:00:00';"
                             f"document.getElementById('end').value = '{day}T03:00:00';")
    browser.click("#preview")
    assert "3 new executions" in browser.text("h2")
    assert len(browser.all("#backfill-preview li")) == 3
    assert acme.call("ListExecutions", S.ListExecutionsRequest(schedule_id=sid)).executions == []  # a preview
    browser.shot("backfill-preview")
    browser.click("#run-backfill")
    assert "created 3 executions" in browser.text(".flash")
    runs = acme.call("ListExecutions", S.ListExecutionsRequest(schedule_id=sid)).executions
    assert len(runs) == 3 and {r.trigger for r in runs} == {common_pb2.TRIGGER_BACKFILL}


def test_edit_keeps_the_version_and_delete_asks_for_the_name(cluster: tuple[Any, str], browser: Browser) -> None:
    _, address = cluster
    acme = Api(address, "acme")
    name = f"edit-{_tag()}"
    sid = acme.create(name=name).id
    browser.login("acme")
    browser.go(f"/schedules/{sid}")
    browser.click("#edit")
    browser.fill("#cron", "15 4 * * *")
    browser.fill("#timezone", "Asia/Tokyo")
    browser.click("#save")
    assert "(version 2)" in browser.text(".flash")
    got = acme.call("GetSchedule", S.GetScheduleRequest(schedule_id=sid)).schedule
    assert (got.cron, got.timezone) == ("15 4 * * *", "Asia/Tokyo")
    browser.click("#edit")
    browser.fill("#cron", "every day")
    browser.click("#save")
    assert browser.text("#cron-error")  # refused next to the field; the schedule is unchanged
    assert acme.call("GetSchedule", S.GetScheduleRequest(schedule_id=sid)).schedule.cron == "15 4 * * *"
    browser.go(f"/schedules/{sid}")
    browser.click("#delete")
    browser.fill("#confirm_name", "not-its-name")
    browser.click("#confirm-delete")
    assert "Type the schedule's name" in browser.text(".flash")
    browser.fill("#confirm_name", name)
    browser.shot("delete-confirm")
    browser.click("#confirm-delete")
    assert f"Deleted {name}" in browser.text(".flash")
    assert acme.fails("GetSchedule", S.GetScheduleRequest(schedule_id=sid)).code.name == "NOT_FOUND"
