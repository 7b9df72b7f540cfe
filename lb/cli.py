"""``lb``: the command-line entry point.

Each subcommand lives in ``lb/commands/<name>.py`` and exposes
``register(subparsers)``; this module only assembles them and owns the one
error path every command shares: a mistake (our own errors, and the
third-party ones :mod:`lb.errors` recognises) becomes one line on stderr
naming the setting or argument, and exit code 2; a usage error is one line
too. A reader that closes the pipe early (``lb top ... | head``) ends the
command quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from config.version import VERSION
from lb.errors import explain
from lb.help import LbHelpFormatter, plain

#: Subcommand modules, in the order ``lb --help`` lists them.
COMMANDS: tuple[str, ...] = (
    "services",
    "produce",
    "run",
    "rebuild",
    "backfill",
    "verify",
    "dlq",
    "read",
    "friends",
    "profiles",
    "serve",
    "sketches",
    "hot",
    "demo",
    "topk",
    "archive",
    "forget",
    "teams",
)

#: Exit code of every mistake (usage, settings, unreachable service).
USAGE_ERROR = 2


class LbParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (the usage is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _tidy(parser: argparse.ArgumentParser) -> None:
    """Plain-text help for ``parser`` and every subcommand below it."""
    parser.formatter_class = LbHelpFormatter
    if parser.description:
        parser.description = plain(parser.description)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help or "")
            for sub in action.choices.values():
                _tidy(sub)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every available subcommand registered."""
    parser = LbParser(prog="lb", description="Real-time leaderboard pipeline.")
    parser.add_argument("--version", action="version", version=f"lb {VERSION}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"lb.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"lb.commands.{name}":
                continue  # not built yet
            raise
        module.register(subparsers)
    _tidy(parser)
    return parser


def _quiet_stdout() -> None:
    """After a broken pipe: send what is still buffered nowhere, so exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _stacks_on_usr1() -> None:
    """``kill -USR1 <pid>`` prints every thread's stack to the process' stderr.

    What a command that does not answer is waiting for (docs/OPERATIONS.md).
    Written to fd 2 itself (a test that captures sys.stderr has no file behind it);
    skipped where there is no SIGUSR1. A crash in native code (``SIGSEGV`` and
    the like) prints the Python stacks too before the process dies as it would
    have: where it was is the first thing a report of such a crash needs.
    """
    with contextlib.suppress(AttributeError, OSError, ValueError):
        faulthandler.register(signal.SIGUSR1, file=2, all_threads=True)  # fd 2: stderr
        faulthandler.enable(file=2, all_threads=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``lb`` subcommand; returns the process exit code."""
    _stacks_on_usr1()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()  # the reader has what it wanted (``| head``)
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        message = explain(exc)
        if message is None:
            raise
        print(f"lb {args.command}: error: {message}", file=sys.stderr)
        return USAGE_ERROR
    return code


if __name__ == "__main__":
    sys.exit(main())
