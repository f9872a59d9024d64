"""Client values the CLI relies on, without a server: a 0 count or factor is refused (None is how
a caller asks for the server's default; on the wire 0 would silently become it), and
update_schedule changes one field of a policy, leaving its other fields unchanged (the mask names
the sub-field)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronwheel.client import InvalidArgument, RetryPolicy
from cronwheel.client.calls import Context, create_schedule, submit, update_schedule
from cronwheel.clock import FakeClock

CTX = Context(FakeClock())


@pytest.mark.parametrize(("make", "field"), [
    (lambda: submit(CTX, "t", retry_policy=RetryPolicy(max_attempts=0)), "retry_policy.max_attempts"),
    (lambda: submit(CTX, "t", retry_policy=RetryPolicy(backoff_multiplier=0)), "retry_policy.backoff_multiplier"),
    (lambda: create_schedule(CTX, "n", "* * * * *", "j", timezone="UTC", misfire_policy="catch_up",
                             max_catch_up=0), "max_catch_up"),
    (lambda: update_schedule(CTX, "00000000-0000-0000-0000-000000000001", max_catch_up=0), "max_catch_up"),
    (lambda: update_schedule(CTX, "00000000-0000-0000-0000-000000000001", max_attempts=0),
     "retry_policy.max_attempts"),
])
def test_a_zero_count_is_refused_not_replaced_by_the_default(make: object, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        make()  # type: ignore[operator]
    assert err.value.field == field and "got 0" in str(err.value)


def test_none_still_means_the_servers_default() -> None:
    req = submit(CTX, "t", retry_policy=RetryPolicy(max_attempts=None, initial_backoff=timedelta(seconds=5))).request
    assert req.retry_policy.max_attempts == 0 and req.retry_policy.initial_backoff.seconds == 5
    req = create_schedule(CTX, "n", "* * * * *", "j", timezone="UTC", misfire_policy="catch_up").request
    assert req.schedule.max_catch_up == 0


def test_update_names_one_policy_field_in_the_mask() -> None:
    req = update_schedule(CTX, "00000000-0000-0000-0000-000000000001", max_backoff=timedelta(hours=2),
                          max_attempts=3, dst_gap="skip", cron="0 3 * * *").request
    assert sorted(req.update_mask.paths) == ["cron", "dst_policy.gap", "retry_policy.max_attempts",
                                             "retry_policy.max_backoff"]
    assert req.schedule.retry_policy.max_attempts == 3 and req.schedule.retry_policy.max_backoff.seconds == 7200
    with pytest.raises(InvalidArgument) as err:
        update_schedule(CTX, "00000000-0000-0000-0000-000000000001", max_attempts=3,
                        retry_policy=RetryPolicy(max_attempts=4))
    assert err.value.field == "max_attempts"
