"""``lb``: the command-line entry point.

Each subcommand lives in ``lb/commands/<name>.py`` and exposes
``register(subparsers)``; this module only assembles them, reads the settings
once and turns our own errors into a clear message and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from domain.errors import LeaderboardError

#: Subcommand modules, in the order ``lb --help`` lists them.
COMMANDS: tuple[str, ...] = (
    "services",
    "produce",
    "run",
    "rebuild",
    "verify",
    "read",
    "friends",
    "serve",
    "sketches",
    "demo",
    "topk",
    "archive",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every available subcommand registered."""
    parser = argparse.ArgumentParser(prog="lb", description="Real-time leaderboard pipeline.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"lb.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"lb.commands.{name}":
                continue  # not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``lb`` subcommand; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except LeaderboardError as exc:
        print(f"lb {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
