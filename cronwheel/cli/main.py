"""The `cronwheel` command.

Exit codes scripts can trust (docs/cli.md "Errors and exit codes"; `exit_code` below is the one table):
    0  success (also when the reader of stdout went away early, as with `| head`)
    1  the operation failed (refused by the server, a precondition, a failed check)
    2  bad usage: unknown flag, bad value (the message names the flag and the help to read)
    3  a dependency is unreachable or too slow (PostgreSQL, etcd, a cronwheel node)
  130  interrupted (Ctrl-C) before completion

Errors are one line on stderr, `cronwheel: error: <what failed>`, never a traceback (set
CRONWHEEL_DEBUG=1 to see one).

Adding a subcommand module (the convention; `cronwheel.cli.apply` is an example name):
    1. the module defines `add_parser(subparsers) -> None`, which adds its command(s) with
       `subparsers.add_parser(NAME, help=..., description=...)` and sets the handler of each
       runnable parser with `p.set_defaults(handler=run)`, `run(args) -> int` (the exit code);
       an API command calls `cronwheel.cli.flags.connection_flags(p)` for --address,
       --token, --json, ... and `client_for(args)` for a cronwheel.client.Client;
    2. its name is added to MODULES below, in `--help` order. Nothing registers itself on import.
Handlers raise cronwheel errors (or let the Client's through): main() turns them into the line
and the exit code, so a module never prints errors or picks exit codes itself.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from cronwheel.errors import CronwheelError, InvalidArgument, Unavailable

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# The subcommand modules, in `--help` order: each exposes `add_parser(subparsers)`.
MODULES = (
    "cronwheel.cli.schedule",  # schedule ...
    "cronwheel.cli.api",  # status, job, exec, events, token
    "cronwheel.cli.explain",  # explain
    "cronwheel.cli.apply",  # apply
    "cronwheel.cli.commands",  # migrate, dev, node, worker
    "cronwheel.cli.webhook",  # webhook ...
    "cronwheel.cli.tenant",  # tenant ...
    "cronwheel.cli.console",  # console
    "cronwheel.cli.rest",  # rest
)


class UsageError(Exception):
    """Bad command-line usage, raised by the parser of `prog` (whose --help the message names)."""

    def __init__(self, message: str, prog: str = "cronwheel") -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so main() owns the output."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)


def build_parser(modules: Sequence[str] = MODULES) -> argparse.ArgumentParser:
    parser = _Parser(prog="cronwheel", description="cronwheel: a distributed job scheduler")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).add_parser(sub)
    return parser


def fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"cronwheel: error: {message}", file=sys.stderr)
    return code


def exit_code(exc: BaseException) -> int:
    """The exit code of an error: the one table (the Client's exceptions subclass these classes;
    DEADLINE_EXCEEDED is the node being too slow, like UNAVAILABLE; an error that knows its code,
    like the worker's WorkerStopped, says it)."""
    own = getattr(exc, "exit_code", None)
    if isinstance(own, int) and not isinstance(own, bool):
        return own
    if isinstance(exc, UsageError | InvalidArgument):
        return EXIT_USAGE
    if isinstance(exc, Unavailable) or getattr(exc, "code", "") == "DEADLINE_EXCEEDED":
        return EXIT_UNAVAILABLE
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_FAILED


def _quiet_stdout() -> int:
    """The reader of stdout went away (`| head`): stop quietly, as git does, and make sure the
    interpreter's last flush of stdout cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args: argparse.Namespace | None = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.version:
            from cronwheel import __version__

            print(f"cronwheel {__version__}")
            return EXIT_OK
        if not args.command:
            parser.print_help()
            return EXIT_USAGE
        code = int(args.handler(args))
        sys.stdout.flush()  # a broken pipe shows here, inside the try, not at exit
        return code
    except BrokenPipeError:
        return _quiet_stdout()
    except UsageError as exc:
        return fail(f"{exc} (see `{exc.prog} --help`)", EXIT_USAGE)
    except CronwheelError as exc:
        describe = getattr(args, "describe_error", None)  # API commands: flag names and hints
        return fail(describe(exc, args) if describe else exc.message, exit_code(exc))
    except KeyboardInterrupt as exc:
        return fail("interrupted", exit_code(exc))
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if os.environ.get("CRONWHEEL_DEBUG"):
            raise
        return fail(f"unexpected {type(exc).__name__}: {exc}", EXIT_FAILED)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
