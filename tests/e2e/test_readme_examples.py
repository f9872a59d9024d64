"""Every example of the README runs as written against `cronwheel dev`, as a new user runs it.

The README marks each ```python and ```sh block with the comment line just above it, which says
how the block is used (a block without a mark fails `test_every_readme_code_block_is_marked`, so
no example escapes this test):

    <!-- example: quickstart -->        the two Quick start commands: compared with what the
                                        tests run (`cronwheel dev` below, `.ci/run`'s last line)
    <!-- example: file NAME -->         saved as NAME in a fresh folder
    <!-- example: serve "PREFIX" -->    each line started in that folder as a process that keeps
                                        running (a second terminal), ready when it prints a line
                                        starting with PREFIX; Ctrl-C (SIGINT) stops it at the end
    <!-- example: run -->               each line run in that folder; it must exit 0

The blocks go in README order, in one folder, with `cronwheel` and `python` of this virtualenv
first on PATH (what `. .venv/bin/activate` gives). One change is made to what is written: the
README's addresses, cronwheel dev's default ports 127.0.0.1:7070 and :7071, become the ports
this dev cluster got (another dev cluster on the machine may hold the defaults, and then
`cronwheel dev` takes free ports; the CLI gets them as $CRONWHEEL_ADDRESS, its documented
default). The README's `send_reminder` jobs must all finish: the README's Worker runs them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cronwheel.client import Client

from .helpers import CRONWHEEL, LineReader, ready_info, wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DEV_ADDRESSES = ("127.0.0.1:7070", "127.0.0.1:7071")  # cronwheel dev's node-1 and node-2 when free
DEV_REST = "127.0.0.1:7090"  # cronwheel dev's REST API when free (docs/rest.md)
_MARKED = re.compile(r"^<!-- example: (?P<kind>\w+)(?: (?P<arg>[^\n]*?))? -->\n```(?P<lang>\w+)\n(?P<body>.*?)^```$",
                     re.M | re.S)
_FENCE = re.compile(r"^```(python|sh)\s*$", re.M)


@dataclass(frozen=True, slots=True)
class Example:
    kind: str  # quickstart | file | serve | run
    arg: str
    lang: str
    body: str
    line: int  # of the fence, for messages

    def commands(self) -> list[str]:
        """The block's command lines (a sh block), without blank lines and whole-line comments."""
        return [ln for ln in self.body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def readme_examples(text: str | None = None) -> list[Example]:
    text = README.read_text(encoding="utf-8") if text is None else text
    out = []
    for m in _MARKED.finditer(text):
        arg = (m["arg"] or "").strip()
        out.append(Example(m["kind"], arg[1:-1] if arg.startswith('"') else arg, m["lang"], m["body"],
                           text.count("\n", 0, m.start("lang")) + 1))
    return out


def test_every_readme_code_block_is_marked() -> None:
    text = README.read_text(encoding="utf-8")
    examples = readme_examples(text)
    assert len(examples) == len(_FENCE.findall(text)), "a ```python or ```sh block of the README has no mark"
    assert {e.kind for e in examples} <= {"quickstart", "file", "serve", "run"}
    assert [e.kind for e in examples if e.kind != "quickstart"], "the README shows no example"


def test_the_quick_start_commands_are_the_ones_the_tests_and_ci_run() -> None:
    quick = [e.body.strip() for e in readme_examples() if e.kind == "quickstart"]
    setup = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && "
    assert quick == [setup + ".venv/bin/cronwheel dev", setup + ".venv/bin/python -m pytest"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == quick[1]


@pytest.fixture
def dev() -> Iterator[dict[str, object]]:
    """`cronwheel dev` as the first Quick start command starts it; its `ready` JSON."""
    proc = subprocess.Popen([*CRONWHEEL, "dev"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield ready_info(LineReader(proc).wait_for("ready ", timeout=120))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def _printed(reader: LineReader, *needles: str) -> bool | None:
    """True once the process has printed a line containing each needle (what it printed so far
    is kept in reader.seen)."""
    while not reader.lines.empty():
        reader.seen.append(reader.lines.get_nowait())
    return True if all(any(n in ln for ln in reader.seen) for n in needles) else None


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # Ctrl-C in its terminal
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def test_every_readme_example_runs_against_cronwheel_dev_and_the_reminders_finish(
        dev: dict[str, object], tmp_path: Path) -> None:
    nodes = [str(n["address"]) for n in dev["nodes"]]  # type: ignore[attr-defined]
    here = dict(zip(DEV_ADDRESSES, nodes[:2], strict=True))
    here[DEV_REST] = str(dev["rest"][0]["url"]).removeprefix("http://")  # type: ignore[index]

    def localize(text: str) -> str:
        for written, real in here.items():
            text = text.replace(written, real)
        return text

    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
           "CRONWHEEL_ADDRESS": nodes[0], "PYTHONUNBUFFERED": "1"}
    served: list[tuple[str, subprocess.Popen[str], LineReader]] = []
    ran: dict[str, str] = {}
    examples = [e for e in readme_examples() if e.kind != "quickstart"]
    assert [e.kind for e in examples].count("serve") >= 1 and any(e.lang == "python" for e in examples)
    try:
        for ex in examples:
            if ex.kind == "file":
                assert ex.lang == "python" and re.fullmatch(r"\w+\.py", ex.arg), ex
                (tmp_path / ex.arg).write_text(localize(ex.body), encoding="utf-8")
                continue
            for cmd in ex.commands():
                if ex.kind == "serve":
                    proc = subprocess.Popen(["bash", "-c", "exec " + localize(cmd)], cwd=tmp_path, env=env,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                    reader = LineReader(proc)
                    served.append((cmd, proc, reader))
                    reader.wait_for(ex.arg, timeout=60)
                else:
                    r = subprocess.run(["bash", "-c", localize(cmd)], cwd=tmp_path, env=env, capture_output=True,
                                       text=True, timeout=180)
                    assert r.returncode == 0, (f"README line {ex.line}: {cmd}", r.stdout, r.stderr)
                    ran[cmd] = r.stdout

        # The Client example's own output: the reminder it waited for succeeded, unique held.
        app = ran["python app.py"].splitlines()
        assert app[0].startswith("succeeded ") and "'user': 42" in app[0], app
        assert "True unique" in app and any("nightly" in ln for ln in app), app

        # Every send_reminder job of the README finishes, run by the README's Worker: 42, the
        # 100 of submit_many, 7 (once: unique), and the CLI's.
        with Client(nodes[0]) as client:
            def all_succeeded() -> bool | None:
                runs = list(client.list_executions(type="send_reminder"))
                done = len(runs) == 103 and all(str(x.state) == "succeeded" for x in runs)
                return True if done else None

            wait_until(all_succeeded, 90, "every send_reminder job of the README to succeed",
                       detail=lambda: sorted(str(x.state) for x in client.list_executions(type="send_reminder")))
        worker = served[0][2]  # the README's Worker printed them: it ran the reminders, not another
        wait_until(lambda: _printed(worker, "reminding user 42 ", "reminding user 9 "), 10,
                   "the README's Worker to print its reminders", detail=lambda: worker.seen[-5:])
    finally:
        for _cmd, proc, _reader in served:
            _stop(proc)
    for cmd, proc, reader in served:
        assert proc.returncode in (0, 130, -signal.SIGINT), (cmd, proc.returncode, reader.seen[-10:])


def test_the_example_marks_are_read_as_the_docstring_says() -> None:
    text = "\n".join([
        "<!-- example: file w.py -->", "```python", "x = 1", "```",
        '<!-- example: serve "worker " -->', "```sh", "cronwheel worker w", "```",
        "<!-- example: run -->", "```sh", "# a comment", "", "python w.py", "```", "```sh", "echo unmarked", "```",
    ])
    got = readme_examples(text)
    assert [(e.kind, e.arg, e.lang) for e in got] == [("file", "w.py", "python"), ("serve", "worker ", "sh"),
                                                       ("run", "", "sh")]
    assert got[1].commands() == ["cronwheel worker w"] and got[2].commands() == ["python w.py"]
    assert len(_FENCE.findall(text)) == 4  # the unmarked block is counted, so the mark test would fail
