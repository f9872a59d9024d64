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
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Handler]] = {}


Configure = Callable[[argparse.ArgumentParser], None]


def command(name: str, help_: str, configure: Configure) -> Callable[[Handler], Handler]:
    """Register a subcommand: `@command("migrate", "help", configure_fn)` on its handler."""

    def register(handler: Handler) -> Handler:
        _COMMANDS[name] = (help_, configure, handler)
        return handler

    return register


def build_parser() -> argparse.ArgumentParser:
    # Import the modules that register commands (kept out of module import for fast --help).
    from cronwheel import cli_api, cli_commands, cli_explain  # noqa: F401

    parser = _Parser(prog="cronwheel", description="cronwheel: a distributed job scheduler")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    for name, (help_, configure, _handler) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        configure(p)
    return parser


def fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"cronwheel: error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
        return _COMMANDS[args.command][2](args)
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
