"""The console's pure parts: form fields and the API's error fields, sessions (idle expiry,
constant-time secrets), the server-rendered chart. Pages themselves are tested in a browser
(tests/browser)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronwheel.client import AsyncClient
from cronwheel.clock import FakeClock
from cronwheel.console import forms
from cronwheel.console.overview import chart
from cronwheel.console.sessions import IDLE, SessionStore, same


def test_the_apis_field_path_names_the_form_field_the_person_typed() -> None:
    assert forms.field_of("schedule.cron") == "cron"
    assert forms.field_of("schedule.timezone") == "timezone"
    assert forms.field_of("schedule.payload_json") == "payload"
    assert forms.field_of("schedule.timeout") == "attempt_timeout_s"
    assert forms.field_of("jitter") == "jitter_s"  # the client's own check names its keyword
    assert forms.field_of("schedule.retry_policy.max_attempts") == ""  # no such form field: top of the form
    assert forms.field_of("range.start", ("start", "end")) == "start"
    assert forms.field_of("range.end_time", ("start", "end")) == "end"


def test_the_form_refuses_what_it_cannot_send_naming_the_field() -> None:
    with pytest.raises(forms.FormError) as bad_json:
        forms.schedule_values({"payload": "{nope"}, creating=True)
    assert bad_json.value.field == "payload"
    with pytest.raises(forms.FormError) as bad_number:
        forms.schedule_values({"jitter_s": "soon"}, creating=True)
    assert bad_number.value.field == "jitter_s"
    v = forms.schedule_values({"name": "n", "cron": "* * * * *", "timezone": "UTC", "job_type": "j",
                               "payload": '{"a": 1}', "jitter_s": "2.5", "paused": "on", "tenant": " acme "},
                              creating=True)
    assert v["payload"] == {"a": 1} and v["jitter"] == timedelta(seconds=2.5) and v["paused"] is True
    assert v["tenant"] == "acme"
    assert "tenant" not in forms.schedule_values({"tenant": "x"}, creating=False)


def test_a_time_without_zone_is_utc_as_the_page_says() -> None:
    got = forms.local_time("2026-03-29T01:30", "start")
    assert got is not None and got.utcoffset() == timedelta(0)
    with pytest.raises(forms.FormError):
        forms.local_time("tomorrow", "start")


def test_an_idle_session_is_forgotten_and_secrets_compare_safely() -> None:
    clock = FakeClock()
    store = SessionStore(clock, lambda tok: AsyncClient("127.0.0.1:1", token=tok))
    s = store.create(AsyncClient("127.0.0.1:1"), admin=False, who="tenant acme", tenant="acme")
    assert store.get(s.id) is s and s.csrf != s.id
    clock.advance(IDLE.total_seconds() - 1)
    assert store.get(s.id) is s  # seen again: the idle time starts over
    clock.advance(IDLE.total_seconds() + 1)
    assert store.get(s.id) is None
    assert same("abc", "abc") and not same("abc", "abd") and not same("", "") and not same(None, "x")


def test_the_chart_is_inline_svg_with_its_values_in_text_and_names_escaped() -> None:
    clock = FakeClock()
    now = clock.now()
    svg = str(chart("fire lag", {"<n1> p50": [(now - timedelta(minutes=10), 0.02), (now, 0.5)]}, now))
    assert svg.startswith("<svg") and "<polyline" in svg
    assert "&lt;n1&gt; p50: 500 ms" in svg  # the last value, readable without the line's colour
    assert "no data yet" in str(chart("start lag", {}, now))


def test_every_tick_outcome_has_its_own_look_in_the_timeline() -> None:
    """A new outcome (pruned_by_retention, skipped_quota came without one) must not fall back to
    the '?' look: fails without their entries."""
    from cronwheel.client.types import TickOutcome
    from cronwheel.console.schedules import LOOKS

    assert set(TickOutcome) <= set(LOOKS), sorted(set(TickOutcome) - set(LOOKS))


def test_the_timeline_ends_at_now_so_a_tick_queued_ahead_is_not_shown_fired() -> None:
    """The node queues an allow tick just before it is due (up to a second early) and
    explain calls it fired; a pause takes it back. The timeline ended a second past now, showed
    such a tick fired, then paused (the browser test that clicked it after a pause failed): fails
    without the end at now."""
    from cronwheel.console.schedules import MAX_TICKS_SHOWN, timeline_bounds

    now = FakeClock().now()
    start, end, cut = timeline_bounds(now, "10m", [now + timedelta(seconds=2 * i) for i in range(10)])
    assert end == now and start == now - timedelta(minutes=10) and not cut
    start, end, cut = timeline_bounds(now, "7d", [now + timedelta(seconds=i) for i in range(10)])
    assert (end, start, cut) == (now, now - timedelta(seconds=MAX_TICKS_SHOWN), True)
