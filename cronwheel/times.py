"""Time's representations and the conversions between them, each written once (issue 49).

An instant is an aware UTC `datetime` inside a room; at the edges it becomes whole Unix seconds
(cron's arithmetic), Unix microseconds as an exact integer (page tokens, unique-key buckets, the
JSON answers of the fire statement, a submit's JSON rows, protobuf Timestamps) or a float of Unix
seconds (the wheel). Pure: no clock is read here (`cronwheel.clock` is the only reader)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SECOND = timedelta(seconds=1)
MICROSECOND = timedelta(microseconds=1)


def to_micros(at: datetime) -> int:
    """An aware instant as exact integer microseconds since the Unix epoch."""
    return (at - EPOCH) // MICROSECOND


def from_micros(us: int) -> datetime:
    """`to_micros` back: exact integer microseconds since the Unix epoch as an aware UTC instant."""
    return EPOCH + us * MICROSECOND


def to_unix_s(at: datetime) -> int:
    """An aware instant as whole Unix seconds, the floor (exact, no float rounding)."""
    return (at - EPOCH) // SECOND


def from_unix_s(seconds: int) -> datetime:
    """Whole Unix seconds as an aware UTC instant."""
    return EPOCH + seconds * SECOND
