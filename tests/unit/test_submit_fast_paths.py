"""The shortcuts the SubmitJobs path takes for speed give what the long way gives: the Client's
idempotency keys, its Timestamp conversions both ways, and the node's check of a payload's JSON
(`plain_json` may skip the walk only where the walk could refuse nothing)."""

from __future__ import annotations

import json
import uuid
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given
from hypothesis import strategies as st

from cronwheel.client import convert as c
from cronwheel.client.calls import v4_text
from cronwheel.cluster.commands.values import _DECODER, MAX_JSON_DEPTH, _check_json_value, parse_json, plain_json
from cronwheel.errors import InvalidArgument
from cronwheel.storage.executions import ExecutionsPort


@given(st.binary(min_size=16, max_size=16))
def test_v4_text_is_the_uuid_modules_text(raw: bytes) -> None:
    assert v4_text(raw) == str(uuid.UUID(bytes=raw, version=4))


def test_v4_text_sets_version_and_variant_over_every_bit() -> None:
    for raw in (b"\x00" * 16, b"\xff" * 16):
        text = v4_text(raw)
        assert text == str(uuid.UUID(bytes=raw, version=4))
        assert uuid.UUID(text).version == 4 and uuid.UUID(text).variant == uuid.RFC_4122


@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.timezones()))
def test_timestamp_conversion_is_protobufs(value: datetime) -> None:
    want = Timestamp()
    want.FromDatetime(value.astimezone(UTC))
    assert c.timestamp(value, "run_at") == want
    assert c.timestamp(value, "run_at") == want  # the cached answer too
    assert c._when(want.seconds, want.nanos) == want.ToDatetime(tzinfo=UTC)


def test_one_instant_in_two_zones_is_one_timestamp_and_the_cache_hands_out_fresh_messages() -> None:
    at = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    there = at.astimezone(timezone(timedelta(hours=5, minutes=45)))
    a, b = c.timestamp(at, "run_at"), c.timestamp(there, "run_at")
    assert a == b and a is not b
    a.seconds += 1  # a caller changing its message changes no other answer
    assert c.timestamp(at, "run_at") == b


def test_a_naive_datetime_is_still_refused() -> None:
    with pytest.raises(InvalidArgument, match="run_at"):
        c.timestamp(datetime(2026, 1, 1), "run_at")


REFUSED = [
    '{"a": "x\\u0000y"}',  # NUL, through an escape
    '["\\ud800"]',  # a lone surrogate, through an escape
    '{"\\u0000": 1}',  # in a key
    "[1e-20000]", "[1E200000]", '{"n": 2.5e131072}',  # exponents out of jsonb's range
    "[0." + "0" * 16_400 + "1]",  # the same, with no exponent marker
    "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),  # nested too deep
]


@pytest.mark.parametrize("raw", REFUSED, ids=range(len(REFUSED)))
def test_what_the_walk_refuses_is_still_refused_and_never_looks_plain(raw: str) -> None:
    assert not plain_json(raw)
    with pytest.raises(InvalidArgument, match="payload_json"):
        parse_json("payload_json", raw)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text()
                    | st.decimals(allow_nan=False, allow_infinity=False),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=30)


@given(JSON)
def test_a_document_that_looks_plain_passes_the_walk(doc: object) -> None:
    raw = json.dumps(doc, default=str, ensure_ascii=False)
    if plain_json(raw):
        _check_json_value("payload_json", _DECODER.decode(raw))  # raises if the shortcut were wrong


def test_an_ordinary_payload_is_plain() -> None:
    assert plain_json(json.dumps({"i": 17, "user": "ana", "tags": ["a", "b"], "amount": 12.5}))


async def test_a_capability_set_registered_once_is_not_sent_again() -> None:
    """The submit path registers the capability sets its jobs require before writing them
    (`register_capability_sets`); a set this port registered already costs no round trip."""
    sent: list[list[str]] = []

    class Conn:
        async def execute(self, query: str, params: dict[str, Any]) -> None:
            sent.append(params["sets"])

    class Db:
        @asynccontextmanager
        async def connection(self) -> Any:
            yield Conn()

    port = ExecutionsPort(Db())  # type: ignore[arg-type]
    await port.register_capability_sets(["gpu=a100"])
    await port.register_capability_sets(["gpu=a100"])
    await port.register_capability_sets(["gpu=a100", "region=eu"])
    assert sent == [["gpu=a100"], ["region=eu"]]
