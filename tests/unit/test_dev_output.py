"""`cronwheel dev`'s wording of a child's exit and of its JSON log lines (cronwheel/devtools/dev.py)."""

from __future__ import annotations

import json
import signal

from cronwheel.devtools.dev import describe_exit, short_log


def test_an_exit_is_described_by_its_code_or_its_signal() -> None:
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(0) == "exited with code 0"


def test_a_json_log_line_is_shortened_to_level_message_and_fields() -> None:
    line = json.dumps({"ts": 1.5, "level": "info", "logger": "x", "msg": "partition acquired", "node": "n",
                       "event": "partition_acquired", "partition": 3})
    assert short_log(line) == "info partition acquired event=partition_acquired partition=3"


def test_other_lines_are_shown_as_they_are() -> None:
    assert short_log("node node-1 listening on 127.0.0.1:7070") == "node node-1 listening on 127.0.0.1:7070"
    assert short_log("{not json") == "{not json"
    assert short_log('{"a": 1}') == '{"a": 1}'
