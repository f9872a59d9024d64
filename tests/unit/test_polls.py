"""The waiting lease calls' registry (cluster/dispatch/polls.py), pure: which calls a wake makes
claim, and how credentials are checked again."""

from __future__ import annotations

from cronwheel import errors as e
from cronwheel.cluster.dispatch.polls import Polls


def test_an_idle_tenants_calls_are_woken_only_for_a_tenant_with_queued_work() -> None:
    polls = Polls(max_per_tenant=100, max_per_worker=10)
    flood = [polls.enter("flood", f"f{i}", ["lp.flood"]) for i in range(3)]
    flood_b = polls.enter("flood", "g", ["lp.other"])
    victim = polls.enter("victim", "v", [])
    admin = polls.enter(None, "ops", [])
    assert list(polls.active_heads()) == [flood[0], flood_b, victim, admin] and not polls.has_idle()
    polls.mark("flood", queued=False)
    polls.mark(None, queued=False)
    assert list(polls.active_heads()) == [victim] and polls.has_idle()
    assert polls.idle_heads({"victim"}) == [admin]  # an admin's call may take from any tenant
    assert polls.idle_heads({"flood"}) == [flood[0], flood_b, admin]  # the oldest of each scope
    assert polls.idle_heads(set()) == []
    assert len(polls.idle_heads(None)) == 3  # the read failed: every idle scope
    polls.mark("flood", queued=True)
    assert list(polls.active_heads()) == [flood[0], flood_b, victim]


def test_what_a_tenants_last_claim_found_is_kept_while_none_of_its_calls_waits() -> None:
    """A worker's lease call returns with its runs and the next one comes: it claims (and is
    woken) as the last one found, not as a stranger."""
    polls = Polls(max_per_tenant=100, max_per_worker=10)
    assert polls.queued_seen("t") is None
    first = polls.enter("t", "w", ["a"])
    polls.mark("t", queued=True)
    polls.leave(first, full=False)
    assert polls.queued_seen("t") is True and not polls.has_idle()
    polls.mark("t", queued=False)
    again = polls.enter("t", "w", ["a"])
    assert polls.has_idle() and list(polls.active_heads()) == [] and polls.idle_heads({"t"}) == [again]


def test_a_check_shared_by_many_waiting_calls_runs_once_per_recheck() -> None:
    polls = Polls(max_per_tenant=2000, max_per_worker=10)
    runs = [0]
    revoked = False

    def check() -> None:
        runs[0] += 1
        if revoked:
            raise e.Unauthenticated("unknown token")

    waiting = [polls.enter("t", f"w{i}", [], check) for i in range(1000)]
    assert polls.recheck() == 0 and runs[0] == 1
    revoked = True
    assert polls.recheck() == 1000 and runs[0] == 2
    assert all(isinstance(p.refused, e.Unauthenticated) and p.event.is_set() for p in waiting)
    assert polls.recheck() == 0 and runs[0] == 2  # refused calls are not checked again
