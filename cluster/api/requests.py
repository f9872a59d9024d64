"""Request bytes that do not decode: INVALID_ARGUMENT at the edge, for every RPC.

gRPC decodes a request before any servicer or interceptor code runs, and answers UNKNOWN with
the decoder's exception text when decoding fails (protobuf refuses a string field that is not
valid UTF-8). The interceptor wraps each handler's deserializer with `tolerant()`: a request that
does not decode becomes an `Undecodable` value, which the interceptor turns into
`InvalidArgument("request", ...)` after authenticating the call, so the status goes through the
one error table like every other refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from cronwheel.errors import InvalidArgument

Deserializer = Callable[[bytes], Any]


@dataclass(frozen=True, slots=True)
class Undecodable:
    """What a request that failed to decode is replaced with."""

    type_name: str
    detail: str

    def error(self) -> InvalidArgument:
        if "utf-8" in self.detail.lower():
            return InvalidArgument("request", f"a string field of {self.type_name} holds invalid UTF-8 "
                                              f"(string fields must be valid UTF-8)")
        return InvalidArgument("request", f"cannot be decoded as {self.type_name}")


def _type_name(deserializer: Deserializer) -> str:
    cls = getattr(deserializer, "__self__", None)
    descriptor = getattr(cls, "DESCRIPTOR", None)
    return str(getattr(descriptor, "full_name", "the request message"))


def tolerant(deserializer: Deserializer | None) -> Deserializer | None:
    """`deserializer`, answering `Undecodable` instead of raising DecodeError."""
    if deserializer is None:
        return None
    name = _type_name(deserializer)

    def deserialize(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except (DecodeError, UnicodeDecodeError) as exc:
            return Undecodable(name, str(exc))

    return deserialize


def check(request: Any) -> None:
    """Raise the InvalidArgument of a request that did not decode."""
    if isinstance(request, Undecodable):
        raise request.error()
