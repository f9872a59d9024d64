"""The dispatch API's edge refuses a caller's bad values as INVALID_ARGUMENT naming the field, through
the API's one conversion of each (cluster/api/convert.py), before any storage is reached."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cronwheel.cluster.api.dispatch_service import DispatchService
from cronwheel.errors import InvalidArgument
from cronwheel.v1 import common_pb2, dispatch_pb2


@pytest.mark.parametrize("seconds", [253402300800, -62135596801])
async def test_a_log_line_time_out_of_range_is_an_invalid_argument_naming_it(seconds: int) -> None:
    """A log line's time past year 9999 (or before year 1) is the caller's error, as every other
    timestamp of the API is (convert.to_dt). It was converted on its own and raised ValueError: an
    INTERNAL answer for a caller's value."""
    line = common_pb2.LogLine(seq=1, message="x")
    line.time.seconds = seconds
    request = dispatch_pb2.AppendLogsRequest(worker_id="w1", items=[dispatch_pb2.LogLines(
        execution_id=str(uuid.uuid4()), fencing_token=1, lines=[common_pb2.LogLine(seq=0, message="ok"), line])])
    service = DispatchService(dispatcher=None)  # type: ignore[arg-type]  # refused before it is used
    context: Any = None
    with pytest.raises(InvalidArgument, match=r"items\[0\]\.lines\[1\]\.time"):
        await service.AppendLogs(request, context)
