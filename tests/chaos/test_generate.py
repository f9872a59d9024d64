"""The generative workload's draws are pure functions of the seed (a failure replays from it) and
reach every policy pair, the quota and the last second before a herd's instant."""

from __future__ import annotations

from chaos.generate import MISFIRES, OVERLAPS, QUOTA_TENANT, describe, draw_herd, draw_ops, draw_schedules


def test_the_same_seed_draws_the_same_schedules_and_operations_and_another_seed_others() -> None:
    assert draw_schedules(4, 60) == draw_schedules(4, 60)
    assert draw_ops(4, 60, 18, 200) == draw_ops(4, 60, 18, 200)
    assert draw_schedules(4, 60) != draw_schedules(5, 60)
    assert draw_ops(4, 60, 18, 200) != draw_ops(5, 60, 18, 200)


def test_every_overlap_and_misfire_pair_is_drawn_in_every_seed() -> None:
    for seed in range(1, 9):
        drawn, quota = draw_schedules(seed, 60)
        combos = describe(drawn, quota)["combinations"]
        assert set(combos) == {f"{o}x{m}" for o in OVERLAPS for m in MISFIRES}, seed
        assert quota >= 5


def test_seeds_1_to_8_draw_jitter_beyond_the_grace_retention_a_quota_and_aimed_herd_operations() -> None:
    jitters, retention, quota_tenants, aimed = set(), set(), 0, 0
    for seed in range(1, 9):
        drawn, _ = draw_schedules(seed, 60)
        jitters |= {d.spec.get("jitter") for d in drawn}
        retention |= {k for d in drawn for k in ("keep_last", "keep_succeeded_for") if k in d.spec}
        quota_tenants += sum(d.tenant == QUOTA_TENANT for d in drawn)
        ops = draw_ops(seed, 60, len(drawn), 200)
        aimed += sum(1 for o in ops if o.schedule >= len(drawn) and o.before_tick and 0.5 <= o.before_tick <= 1.0)
        assert {o.kind for o in ops} >= {"pause", "update"}
    assert any(j is not None and j.total_seconds() > 2 for j in jitters)  # beyond the chaos grace of 2 s
    assert retention == {"keep_last", "keep_succeeded_for"} and quota_tenants > 0 and aimed > 8


def test_a_herd_shares_one_instant_on_the_queued_ahead_path() -> None:
    herd = draw_herd(1, 50)
    assert len(herd) == 50 and {d.spec["cron"] for d in herd} == {"*/10 * * * * *"}
    assert {d.spec["overlap_policy"] for d in herd} == {"allow"}
