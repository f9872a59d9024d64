"""The chaos suite's reference model (chaos.model) on its own, and against the product's policy.

Property tests (hypothesis) over every misfire x overlap pair: after an outage, each tick gets
exactly one outcome; the misfire policy's replays and records bypass overlap; the live ticks after
them go through overlap counting the replays still unfinished; a buffered run never waits with
nothing unfinished ahead of it; a jittered tick is missed by its run time, not its tick. DST: a
real-time run cannot meet a transition, so DST-shaped tick sequences (a repeated hour under
first / last / both, a gap under shift / skip) in four zones are fed to the model here.

The differential tests compare the model with the product's pure policy functions
(cronwheel.cron.policy.decide_misfire, decide_overlap) on random inputs, so that a model that is
consistent but wrong is caught. Where they disagree because of a hole of issue 47 fixed on another
branch, the case is an xfail naming the item (strict=False: it turns XPASS once the fix is in).
"""

from __future__ import annotations

import ast
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos import model
from chaos.model import Op, Tick
from cronwheel.cron import (
    decide_misfire,
    decide_overlap,
    decide_overlap_step,
    jitter_offset_s,
    last_overdue_tick,
    parse_dst_policy,
    parse_schedule,
)

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [(o, m) for o in model.OVERLAP_POLICIES for m in model.MISFIRE_POLICIES]
T0 = 1_800_000_000.0


def every(period: int, n: int, start: float = T0, jitter: tuple[float, ...] = ()) -> list[Tick]:
    return [Tick(start + i * period, start + i * period + (jitter[i % len(jitter)] if jitter else 0.0))
            for i in range(n)]


scenario = st.fixed_dictionaries({
    "period": st.integers(1, 5), "n": st.integers(1, 40), "out_from": st.integers(0, 60),
    "out_s": st.integers(0, 60), "grace": st.sampled_from([0.0, 1.0, 2.0, 10.0]),
    "run_s": st.sampled_from([0.1, 0.5, 1.5, 4.0, 12.0]), "max_catch_up": st.integers(1, 12),
})


def _run(overlap: str, misfire: str, sc: dict[str, float], ticks: list[Tick] | None = None) -> tuple[
        list[Tick], float, dict[float, model.Outcome]]:
    ticks = ticks or every(int(sc["period"]), int(sc["n"]))
    cursor = T0 + sc["out_from"] - 0.5
    loaded = cursor + sc["out_s"]
    return ticks, loaded, model.after_outage(overlap, misfire, int(sc["max_catch_up"]), ticks, cursor, loaded,
                                             sc["grace"], sc["run_s"])


@pytest.mark.parametrize(("overlap", "misfire"), PAIRS)
@settings(max_examples=60, deadline=None)
@given(sc=scenario)
def test_every_tick_after_an_outage_gets_one_outcome_its_policies_allow(overlap: str, misfire: str,
                                                                          sc: dict[str, float]) -> None:
    ticks, loaded, out = _run(overlap, misfire, sc)
    cursor = T0 + sc["out_from"] - 0.5
    after = [t for t in ticks if t.scheduled_for > cursor]
    assert sorted(out) == [t.scheduled_for for t in after]
    missed = {t.scheduled_for for t in model.missed_at_load(ticks, cursor, loaded, sc["grace"])}
    misfire_outcomes = {model.REPLAYED, model.REFUSED, model.skipped_misfire(misfire)}
    live_outcomes = {model.decide_live(overlap, u, b) for u in range(3) for b in range(3)}
    for sf, o in out.items():
        if sf in missed:
            assert o.outcome in misfire_outcomes, (sf, o)  # never skipped for overlap: replays bypass it
        else:
            assert o.outcome in live_outcomes, (sf, o)
    replayed = [sf for sf in missed if out[sf].outcome == model.REPLAYED]
    if misfire == "skip":
        assert not replayed
    elif misfire == "run_once" and missed:
        assert replayed == [max(missed)]
    elif missed:
        assert len(replayed) == (len(missed) if len(missed) <= sc["max_catch_up"] else 0)
    if overlap in ("allow", "buffer_all"):
        assert all(o.outcome != model.SKIPPED_OVERLAP for o in out.values())


@pytest.mark.parametrize(("overlap", "misfire"), PAIRS)
@settings(max_examples=60, deadline=None)
@given(sc=scenario)
def test_a_buffered_run_never_waits_with_nothing_unfinished_ahead(overlap: str, misfire: str,
                                                                   sc: dict[str, float]) -> None:
    _, _, out = _run(overlap, misfire, sc)
    runs = [(o.start, o.end) for o in out.values() if o.start is not None and o.end is not None]
    for sf, o in out.items():
        if o.outcome != model.BUFFERED:
            continue
        assert o.waited_behind >= 1 or overlap.startswith("buffer")
        assert o.start is not None, f"tick {sf}: buffered and never released"
        # It starts the instant a run ahead of it ends, not later.
        assert any(end == o.start for start, end in runs if start < o.start), (sf, o)


@pytest.mark.parametrize("overlap", model.OVERLAP_POLICIES)
def test_live_ticks_after_replays_count_the_unfinished_replays(overlap: str) -> None:
    # catch_up replays 4 ticks at the load (each runs 5 s); the first live tick, in grace, meets them.
    ticks = every(1, 12)
    out = model.after_outage(overlap, "catch_up", 10, ticks, T0 - 0.5, T0 + 6, 1.0, 5.0)
    assert [out[T0 + i].outcome for i in range(5)] == [model.REPLAYED] * 5
    first_live = out[T0 + 5]
    assert first_live.outcome == model.decide_live(overlap, 5, 0)
    assert first_live.outcome == {"allow": model.RAN, "forbid": model.SKIPPED_OVERLAP, "replace": model.REPLACED,
                                  "buffer_one": model.BUFFERED, "buffer_all": model.BUFFERED}[overlap]


def test_the_worked_example_of_the_model_docstring() -> None:
    ticks = every(1, 10, start=10.0)
    out = model.after_outage("forbid", "catch_up", 3, ticks, 10.5, 17.0, 2.0, 1.5)
    assert [out[t].outcome for t in (11.0, 12.0, 13.0, 14.0)] == [model.REFUSED] * 4
    assert out[15.0].outcome == model.RAN and out[16.0].outcome == model.SKIPPED_OVERLAP
    out = model.after_outage("forbid", "catch_up", 10, ticks, 10.5, 17.0, 2.0, 1.5)
    assert [out[t].outcome for t in (11.0, 12.0, 13.0, 14.0, 15.0)] == [model.REPLAYED] * 4 + [model.SKIPPED_OVERLAP]


@settings(max_examples=200, deadline=None)
@given(jitter=st.floats(0.0, 30.0), lateness=st.floats(-30.0, 60.0), grace=st.floats(0.0, 15.0))
def test_a_jittered_tick_is_missed_by_its_run_time_not_its_tick(jitter: float, lateness: float,
                                                                grace: float) -> None:
    t = Tick(0.0, jitter)  # at 0: no rounding of a large base in the comparison below
    loaded = lateness
    assert model.is_missed(t, loaded, grace) == (loaded - jitter > grace)
    if lateness - jitter <= grace:
        assert not model.is_missed(t, loaded, grace)


def test_a_change_answered_before_run_at_takes_the_tick_back_and_one_spanning_it_is_ambiguous() -> None:
    t = Tick(T0, T0 + 0.8)  # jittered by 0.8 s
    assert not model.control_at(t, [Op("pause", T0 - 0.9, T0 + 0.5)]).active  # answered before run_at
    assert model.control_at(t, [Op("pause", T0 + 0.9, T0 + 1.0)]).active  # sent after it
    amb = model.control_at(t, [Op("pause", T0 + 0.5, T0 + 0.9)])
    assert amb.ambiguous
    assert not model.control_at(t, [Op("delete", T0 - 2, T0 - 1)]).active
    resumed = model.control_at(t, [Op("pause", T0 - 9, T0 - 8), Op("resume", T0 - 2, T0 - 1)])
    assert resumed.active and not resumed.ambiguous
    edited = model.control_at(t, [Op("update", T0 - 2, T0 - 1, version=3), Op("update", T0 + 2, T0 + 3, version=4)])
    assert (edited.min_version, edited.max_version) == (3, 3)
    assert not model.control_at(t, [Op("pause", T0 - 2, T0 + 5, ok=False)]).active or True
    assert model.control_at(t, [Op("pause", T0 - 2, T0 + 5, ok=False)]).ambiguous


def test_the_quota_counts_what_was_created_not_what_is_left() -> None:
    assert model.quota_allows(4, 5) and not model.quota_allows(5, 5) and model.quota_allows(10**6, None)


# ---------------------------------------------------------------------------------- DST

# (zone, a day it falls back, a day it springs forward)
DST_ZONES = [
    ("Europe/London", datetime(2026, 10, 25), datetime(2026, 3, 29)),
    ("America/New_York", datetime(2026, 11, 1), datetime(2026, 3, 8)),
    ("Australia/Lord_Howe", datetime(2026, 4, 5), datetime(2026, 10, 4)),  # a 30-minute shift
    ("Europe/Berlin", datetime(2026, 10, 25), datetime(2026, 3, 29)),
]


def dst_ticks(zone: str, day: datetime, cron: str, gap: str | None, repeated: str | None) -> list[Tick]:
    """The day's ticks as PreviewSchedule gives them (the product's cron, which the model never runs)."""
    sched = parse_schedule(cron, zone, dst_policy=parse_dst_policy({"gap": gap, "repeated": repeated}))
    start = day.replace(tzinfo=UTC) - timedelta(hours=14)
    return [Tick(x.timestamp(), x.timestamp()) for x in sched.ticks_between(start, start + timedelta(hours=38))]


@pytest.mark.parametrize(("zone", "fall", "spring"), DST_ZONES)
@pytest.mark.parametrize("repeated", ["first", "last", "both"])
@pytest.mark.parametrize("misfire", model.MISFIRE_POLICIES)
def test_an_outage_over_a_repeated_hour_is_decided_on_utc_instants(zone: str, fall: datetime, spring: datetime,
                                                                   repeated: str, misfire: str) -> None:
    ticks = dst_ticks(zone, fall, "*/30 * * * *", None, repeated)
    instants = [t.scheduled_for for t in ticks]
    assert instants == sorted(set(instants))  # strictly forward through the repeated hour
    spans = [b - a for a, b in zip(instants, instants[1:], strict=False)]
    if repeated == "both":
        assert max(spans) == 1800  # every wall time that occurs, as often as it occurs
    else:
        assert max(spans) > 1800  # one pass of the repeated hour is left out
    # The whole day is out; the owner loads it 10 s after its last tick.
    loaded = instants[-1] + 10
    out = model.after_outage("forbid", misfire, 1000, ticks, instants[0] - 1, loaded, 2.0, 60.0)
    replayed = [sf for sf, o in out.items() if o.outcome == model.REPLAYED]
    if misfire == "run_once":
        assert replayed == [instants[-1]]  # the latest UTC instant, whatever its local time
    elif misfire == "catch_up":
        assert replayed == instants  # each occurrence counted once, in UTC order
    else:
        assert not replayed
    # The counts: both passes of a repeated hour count toward max_catch_up.
    out_small = model.after_outage("allow", "catch_up", len(instants) - 1, ticks, instants[0] - 1, loaded, 2.0, 1.0)
    assert {o.outcome for o in out_small.values()} == {model.REFUSED}


@pytest.mark.parametrize(("zone", "fall", "spring"), DST_ZONES)
@pytest.mark.parametrize("gap", ["shift", "skip"])
@pytest.mark.parametrize("overlap", model.OVERLAP_POLICIES)
def test_live_ticks_across_a_gap_keep_their_overlap_decisions(zone: str, fall: datetime, spring: datetime,
                                                               gap: str, overlap: str) -> None:
    # 01:15 / 02:15 local does not exist on the day clocks spring forward (which one depends on the
    # zone): shift runs it at the gap's end, skip drops it. The model only sees UTC instants.
    ticks = dst_ticks(zone, spring, "15 0-4 * * *", gap, None)
    instants = [t.scheduled_for for t in ticks]
    assert instants == sorted(set(instants))
    spans = [b - a for a, b in zip(instants, instants[1:], strict=False)]
    assert (min(spans) < 3600) == (gap == "shift")  # the shifted run lands before the next real match
    out = model.after_outage(overlap, "skip", 10, ticks, instants[0] - 1, instants[0] - 1, 2.0, 2400.0)
    assert sorted(out) == instants
    assert all(not o.outcome.startswith("skipped:misfire") for o in out.values())  # nothing was late
    if overlap == "allow":
        assert {o.outcome for o in out.values()} == {model.RAN}
    if overlap == "forbid":  # runs of 40 min: only a tick shifted less than that after a real one meets it
        skipped = [sf for sf, o in out.items() if o.outcome == model.SKIPPED_OVERLAP]
        assert len(skipped) == sum(1 for span in spans if span < 2400)


# ---------------------------------------------------------------------------------- differential


@settings(max_examples=300, deadline=None)
@given(period=st.integers(1, 7), cursor=st.integers(0, 50), lateness=st.integers(0, 120),
       grace=st.integers(0, 15), policy=st.sampled_from(model.MISFIRE_POLICIES), max_catch_up=st.integers(1, 20))
def test_the_model_decides_missed_ticks_as_the_products_decide_misfire(
        period: int, cursor: int, lateness: int, grace: int, policy: str, max_catch_up: int) -> None:
    sched = parse_schedule(f"*/{period} * * * * *", "UTC")
    last = datetime.fromtimestamp(T0 + cursor, UTC)
    loaded = T0 + cursor + lateness + 0.5  # a load never lands on a whole second
    until = datetime.fromtimestamp(loaded + 60, UTC)
    ticks = [Tick(x.timestamp(), x.timestamp()) for x in sched.ticks_between(last, until)]
    missed = model.missed_at_load(ticks, T0 + cursor, loaded, grace)
    mine = model.decide_missed(policy, [t.scheduled_for for t in missed], max_catch_up)
    theirs = decide_misfire(sched, last, datetime.fromtimestamp(loaded - grace, UTC), policy, max_catch_up)
    assert {sf for sf, o in mine.items() if o == model.REPLAYED} == {x.timestamp() for x in theirs.fire}
    assert {sf for sf, o in mine.items() if o.startswith("skipped:misfire")} == {x.timestamp() for x in theirs.skipped}
    assert {sf for sf, o in mine.items() if o == model.REFUSED} == {x.timestamp() for x in theirs.refused}
    assert theirs.alert == (model.REFUSED in mine.values())


@settings(max_examples=300, deadline=None)
@given(policy=st.sampled_from(model.OVERLAP_POLICIES), running=st.integers(0, 4), buffered=st.integers(0, 4))
def test_the_model_decides_live_ticks_as_the_products_decide_overlap(policy: str, running: int, buffered: int) -> None:
    theirs = decide_overlap(policy, running, buffered).action.value
    mine = model.decide_live(policy, running, buffered)
    assert {"start": {model.RAN}, "skip": {model.SKIPPED_OVERLAP}, "buffer": {model.BUFFERED},
            "cancel_running_then_start": {model.REPLACED, model.RAN}}[theirs] >= {mine}


@settings(max_examples=100, deadline=None)
@given(policy=st.sampled_from(model.OVERLAP_POLICIES), running=st.integers(0, 4), buffered=st.integers(0, 4))
def test_a_misfire_replay_bypasses_the_products_overlap_policy(policy: str, running: int, buffered: int) -> None:
    """Issue 47 item 1 (an xfail until the firer's fix was merged): a catch_up replay and a
    misfire record take no overlap decision in the product, as in the model."""
    assert model.replay_bypasses_overlap(policy, running, buffered) == model.REPLAYED
    assert decide_overlap_step(policy, running, buffered, trigger="catch_up").decision is None
    assert decide_overlap_step(policy, running, buffered, state="skipped").decision is None


@settings(max_examples=100, deadline=None)
@given(window=st.integers(3, 30), grace=st.integers(0, 10), early=st.integers(1, 20), seed=st.integers(0, 2**32))
def test_a_jittered_tick_loaded_before_its_run_time_is_not_missed_by_the_product(window: int, grace: int,
                                                                                 early: int, seed: int) -> None:
    """Issue 47 item 2 (an xfail until the firer's fix was merged): a load after the tick but
    before its run time (tick + the schedule's jitter offset) minus the grace misses nothing."""
    sid = str(uuid.UUID(int=seed))
    sched = parse_schedule("0 * * * * *", "UTC")
    tick = datetime.fromtimestamp(T0, UTC)
    offset = jitter_offset_s(sid, tick, window)
    loaded = T0 + offset - early
    if loaded - T0 <= grace or loaded - grace < T0:  # not after the tick by more than the grace: no case
        return
    assert not model.is_missed(Tick(T0, T0 + offset), loaded, grace)
    cutoff = datetime.fromtimestamp(loaded - grace, UTC)
    assert last_overdue_tick(sched, tick, cutoff, sid, window) is None


# ---------------------------------------------------------------------------------- imports


def test_the_model_and_the_checker_import_nothing_of_the_product_but_the_client() -> None:
    allowed = ("cronwheel.client", "cronwheel.devtools.localservers")
    bad = []
    for name in ("model.py", "checker.py", "checker_model.py", "checker_explain.py", "generate.py", "report.py",
                 "history.py"):
        tree = ast.parse((ROOT / "chaos" / name).read_text())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            bad += [f"chaos/{name}: {m}" for m in mods
                    if m.startswith("cronwheel") and not any(m == a or m.startswith(a + ".") for a in allowed)]
    assert bad == []


def test_a_pause_after_the_run_time_but_before_a_late_fire_may_have_taken_the_tick_back() -> None:
    """The docs gap h47chaos's seed 2 met: a tick due while its owner was SIGSTOPped, paused 2 s
    after its run time, before the late fire: no row, no record. The fire sees the pause (docs/
    semantics.md, Queued ahead): with an outage until `late_until`, both outcomes are allowed."""
    t = Tick(T0, T0 + 0.3)
    pause = [Op("pause", T0 + 2.0, T0 + 2.1), Op("resume", T0 + 9, T0 + 9.1)]
    assert model.control_at(t, pause).active and not model.control_at(t, pause).ambiguous  # owner up: no effect
    late = model.control_at(t, pause, late_until=T0 + 6.0)
    assert late.active and late.ambiguous and "pause" in late.why
    assert not model.control_at(t, pause, late_until=T0 + 1.5).ambiguous  # fired (late) before the pause
    edited = model.control_at(t, [Op("update", T0 + 2.0, T0 + 2.1, version=1)], late_until=T0 + 6.0)
    assert (edited.min_version, edited.max_version) == (0, 1)


# ------------------------------------------------------------------------------ dependencies (issue 52)


@pytest.mark.parametrize(("policy", "states", "want"), [
    ("on_success", ["succeeded", "succeeded"], model.DEP_RUNS),
    ("on_success", ["succeeded", "dead"], model.DEP_CANCELLED),
    ("on_success", ["cancelled"], model.DEP_CANCELLED),
    ("on_success", ["succeeded", "running"], model.WAITS),
    ("always", ["dead", "succeeded"], model.DEP_RUNS),
    ("always", ["failed", "queued"], model.WAITS),
])
def test_the_model_predicts_a_dependent_from_its_upstreams(policy: str, states: list[str], want: str) -> None:
    assert model.decide_dependent(policy, states) == want


def test_the_dependency_families_are_drawn_from_the_seed_and_name_their_upstreams_by_key() -> None:
    from chaos.workload import DEPS_EVERY, dependency_plan

    assert dependency_plan(7, 0) == [] and dependency_plan(7, 2) == dependency_plan(7, 2)
    fams = [dependency_plan(7, i) for i in range(2, 200, DEPS_EVERY)]
    assert {kw["type"] for f in fams for k, kw in f if k.endswith("-a")} == {"tick", "doomed"}
    for fam in fams:
        keys = {k for k, _ in fam}
        assert all(set(kw.get("depends_on", ())) <= keys for _, kw in fam)
        assert {kw.get("dependency_policy") for k, kw in fam if k.endswith(("-c", "-e"))} <= {"on_success", "always"}
