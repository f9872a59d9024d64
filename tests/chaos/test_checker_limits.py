"""The tenancy invariants can fail: a third run of a key with limit 2, and claims faster than a
tenant's bucket, are reported; what the cluster allows is not."""

from __future__ import annotations

from chaos.checker_limits import attempt_spans, check_concurrency_keys, check_rate_limits
from chaos.history import ExecutionRec, History, RunMeta, RunRec, TenantLimitRec

T0 = 1_800_000_000.0


def meta() -> RunMeta:
    return RunMeta("limits", 1, 8, 3.0, 10.0, 60.0, T0, T0 + 60, T0 + 70)


def keyed(eid: str, key: str = "customer:42", limit: int = 2, tenant: str = "a", token: int = 1) -> ExecutionRec:
    return ExecutionRec(id=eid, schedule_id=None, partition=0, type="hold", scheduled_for=T0, run_at=T0,
                        state="succeeded", attempt=token, fencing_token=token, finished_at=T0 + 50, tenant=tenant,
                        concurrency_key=key, concurrency_limit=limit)


def span(eid: str, t0: float, t1: float | None, token: int = 1, leased: float | None = None) -> list[RunRec]:
    out = [RunRec("start", "w1", eid, token, token, t0, leased_at=leased if leased is not None else t0)]
    if t1 is not None:
        out.append(RunRec("end", "w1", eid, token, token, t1, outcome="ok"))
    return out


def test_two_runs_of_a_key_with_limit_2_at_once_pass_and_a_third_is_named() -> None:
    ex = (keyed("e1"), keyed("e2"), keyed("e3"), keyed("o1", key="customer:7"))
    ok = History(meta(), executions=ex, runs=(*span("e1", T0, T0 + 2), *span("e2", T0 + 1, T0 + 3),
                                              *span("e3", T0 + 2, T0 + 4), *span("o1", T0 + 1, T0 + 5)))
    assert check_concurrency_keys(ok).ok  # e1 ends as e3 starts; o1 is another key
    bad = History(meta(), executions=ex, runs=(*span("e1", T0, T0 + 2), *span("e2", T0 + 1, T0 + 3),
                                               *span("e3", T0 + 1.5, T0 + 4)))
    r = check_concurrency_keys(bad)
    assert not r.ok and "3 runs" in r.violations[0] and "customer:42" in r.violations[0]


def test_an_attempt_whose_lease_was_taken_back_counts_only_until_the_next_attempt_started() -> None:
    """A paused worker goes on running attempt 1 after the reaper handed the run to attempt 2:
    the cluster held one lease at a time, so that is no third run."""
    ex = (keyed("e1", token=2), keyed("e2"))
    h = History(meta(), executions=ex, runs=(*span("e1", T0, T0 + 30, token=1), *span("e1", T0 + 10, T0 + 12, token=2),
                                             *span("e2", T0 + 11, T0 + 13)))
    assert attempt_spans(h)[("e1", 1)] == (T0, T0 + 10)
    assert check_concurrency_keys(h).ok


def test_a_paused_workers_attempt_counts_until_its_lease_provably_ran_out_not_until_the_next_claim() -> None:
    """Seed 1 of the first run: w2 paused with two runs of a key (limit 2); their leases lapsed and
    the reaper requeued them; a third run of the key started; one of the two was claimed again
    only later. A lease is certain for its first worker-lease seconds (and, with heartbeats, until
    the pause + the lease - one heartbeat interval), not until the next claim. The cluster held
    two leases at a time throughout: no violation. A run started while the paused worker's
    leases certainly still held would be one."""
    from chaos.history import InjectionRecord

    m = RunMeta("limits", 1, 8, 3.0, 10.0, 4.0, T0, T0 + 60, T0 + 70)  # worker lease 4 s, heartbeat 1 s
    ex = (keyed("a", token=2), keyed("b", token=2), keyed("c"))
    paused = (InjectionRecord("pause-worker", "w2", T0 + 0.2, T0 + 6),)
    runs = (RunRec("start", "w2", "a", 1, 1, T0, leased_at=T0), RunRec("start", "w2", "b", 1, 1, T0, leased_at=T0),
            *span("c", T0 + 4.05, T0 + 4.5),  # after the two leases' first 4 s: the reaper may have taken them
            RunRec("start", "w1", "a", 2, 2, T0 + 4.2, leased_at=T0 + 4.2), RunRec("end", "w1", "a", 2, 2, T0 + 4.5),
            RunRec("start", "w1", "b", 2, 2, T0 + 5.0, leased_at=T0 + 5.0), RunRec("end", "w1", "b", 2, 2, T0 + 5.5),
            RunRec("end", "w2", "a", 1, 1, T0 + 6.1), RunRec("end", "w2", "b", 1, 1, T0 + 6.1))
    h = History(m, executions=ex, runs=runs, injections=paused)
    assert attempt_spans(h)[("b", 1)] == (T0, T0 + 4.0)
    assert check_concurrency_keys(h).ok
    early = (*runs[:2], *span("c", T0 + 3.5, T0 + 4.5), *runs[4:])  # while both leases still held
    assert not check_concurrency_keys(History(m, executions=ex, runs=early, injections=paused)).ok


def test_claims_within_the_bucket_pass_and_one_claim_too_many_is_named() -> None:
    ex = tuple(keyed(f"e{i}", key="", tenant="slow") for i in range(8))
    limits = (TenantLimitRec("slow", 2.0, 3.0),)
    # A full bucket of 3 at once, then one every 0.5 s: conforms.
    times = [T0, T0, T0, T0 + 0.5, T0 + 1.0, T0 + 1.5, T0 + 2.0, T0 + 2.5]
    runs = tuple(r for i, t in enumerate(times) for r in span(f"e{i}", t + 0.01, t + 0.02, leased=t))
    assert check_rate_limits(History(meta(), executions=ex, runs=runs, tenant_limits=limits)).ok
    fast = [T0, T0, T0, T0 + 0.1, T0 + 1.0, T0 + 1.5, T0 + 2.0, T0 + 2.5]  # the 4th claim 0.4 s early
    runs = tuple(r for i, t in enumerate(fast) for r in span(f"e{i}", t + 0.01, t + 0.02, leased=t))
    r = check_rate_limits(History(meta(), executions=ex, runs=runs, tenant_limits=limits))
    assert not r.ok and "tenant slow" in r.violations[0]


def test_a_tenant_without_a_rate_is_not_judged() -> None:
    ex = tuple(keyed(f"e{i}", tenant="free") for i in range(5))
    runs = tuple(r for i in range(5) for r in span(f"e{i}", T0, T0 + 0.01))
    assert check_rate_limits(History(meta(), executions=ex, runs=runs,
                                     tenant_limits=(TenantLimitRec("free", None, None),))).ok


def test_an_attempt_started_after_its_lease_lapsed_is_not_counted_and_does_not_stick() -> None:
    """Seed 5: a worker paused with its long poll in flight read two runs' leases after they had
    lapsed and started them anyway (zombies: the reaper had requeued them). Their provable spans
    are empty; counted, the sweep met their end before their start and kept them running for
    ever (4 'runs at once'). Fails without the fix."""
    from chaos.history import InjectionRecord

    m = RunMeta("limits", 5, 8, 3.0, 10.0, 4.0, T0, T0 + 60, T0 + 70)
    ex = (keyed("a", token=2), keyed("b", token=2), keyed("c"), keyed("d"))
    runs = (RunRec("start", "w2", "a", 1, 1, T0 + 5.5, leased_at=T0), RunRec("end", "w2", "a", 1, 1, T0 + 6.0),
            RunRec("start", "w2", "b", 1, 1, T0 + 5.5, leased_at=T0), RunRec("end", "w2", "b", 1, 1, T0 + 6.0),
            *span("c", T0 + 5.5, T0 + 6.0), *span("d", T0 + 5.5, T0 + 6.0),
            RunRec("start", "w1", "a", 2, 2, T0 + 6.1, leased_at=T0 + 6.1), RunRec("end", "w1", "a", 2, 2, T0 + 6.5),
            RunRec("start", "w1", "b", 2, 2, T0 + 6.1, leased_at=T0 + 6.1), RunRec("end", "w1", "b", 2, 2, T0 + 6.5))
    h = History(m, executions=ex, runs=runs, injections=(InjectionRecord("pause-worker", "w2", T0 - 0.1, T0 + 5.4),))
    r = check_concurrency_keys(h)
    assert r.ok, r.violations
    assert r.counts["peak:a/customer:42"] == 2
