"""The `cronwheel` command.

Exit codes scripts can trust:
    0  success
    1  the operation failed (refused by the server, a precondition, a failed check)
    2  bad usage: unknown flag, bad value (the message names the flag)
    3  a dependency is unreachable (PostgreSQL, etcd, a cronwheel node)
  130  interrupted (Ctrl-C) before completion

Errors are one line on stderr, `cronwheel: error: <what failed>`, never a traceback (set
CRONWHEEL_DEBUG=1 to see one).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from cronwheel.errors import CronwheelError, InvalidArgument, Unavailable

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so main() owns the output."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


Handler = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its name, help line, flags (`configure`) and handler."""

    name: str
    help: str
    configure: Configure
    handler: Handler


def commands() -> list[Command]:
    """Every subcommand, in `--help` order: the one table. Each module defines its commands as
    plain `Command` values; nothing registers itself on import. (The modules are imported here,
    not at the top, so `cronwheel --version` stays fast and cli_* can import this module.)"""
    from cronwheel import cli_api, cli_api_schedule, cli_commands, cli_console, cli_explain

    return [
        cli_api_schedule.SCHEDULE,
        cli_api.STATUS,
        cli_api.JOB,
        cli_api.EXEC,
        cli_api.TOKEN,
        cli_commands.MIGRATE,
        cli_commands.DEV,
        cli_commands.NODE,
        cli_commands.WORKER,
        cli_explain.EXPLAIN,
        cli_console.CONSOLE,
    ]


def build_parser(table: Sequence[Command] | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="cronwheel", description="cronwheel: a distributed job scheduler")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    for c in commands() if table is None else table:
        c.configure(sub.add_parser(c.name, help=c.help, description=c.help))
    return parser


def fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"cronwheel: error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        table = commands()
        parser = build_parser(table)
        args = parser.parse_args(argv)
        if args.version:
            from cronwheel import __version__

            print(f"cronwheel {__version__}")
            return EXIT_OK
        if not args.command:
            parser.print_help()
            return EXIT_USAGE
        return next(c.handler for c in table if c.name == args.command)(args)
    except UsageError as exc:
        return fail(f"{exc} (see `cronwheel --help`)", EXIT_USAGE)
    except InvalidArgument as exc:
        return fail(exc.message, EXIT_USAGE)
    except Unavailable as exc:
        return fail(exc.message, EXIT_UNAVAILABLE)
    except CronwheelError as exc:
        return fail(exc.message, EXIT_FAILED)
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if os.environ.get("CRONWHEEL_DEBUG"):
            raise
        return fail(f"unexpected {type(exc).__name__}: {exc}", EXIT_FAILED)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
