"""``lb archive run``: final standings of closed daily/weekly boards to Parquet.

A board is final once its window ended more than the game's
``lateness_seconds`` (+ ``--margin``) ago. Each final board not archived yet is
read whole (all shards merged, in rank order) and written to
``<dir>/<game>/<kind>/<period>.parquet`` (columns rank, playerId, score,
composite), listed in ``<dir>/<game>/manifest.json`` and marked in
``<ns>:{<game>}:meta:archived``, so it is done once; re-runs are no-ops. The
board stays readable by its id in Redis until its key expires. See
docs/ARCHIVE.md. ``--once`` runs one pass and prints its report as JSON; by
default a pass runs every ``--every`` seconds (reports printed when something
was archived).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from config.settings import Settings
from domain.errors import ConfigError
from jobs.archiver import Archiver
from lb.argtypes import positive_float
from lb.commands.read import now_ms
from lb.commands.topk import periodic
from readers import game_catalog, redis_client


def _archive_run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    directory = Path(args.dir) if args.dir else settings.state_dir / "archive"
    if args.margin < 0:
        raise ConfigError(f"--margin must be >= 0, got {args.margin:g}")
    archiver = Archiver(
        redis_client(settings, socket_timeout=30.0),
        game_catalog(settings),
        settings.namespace,
        directory,
        margin_ms=round(args.margin * 1000),
    )
    if args.once:
        print(json.dumps(archiver.run_once(now_ms()).as_dict()))
        return 0

    def step(now: int) -> dict[str, object]:
        report = archiver.run_once(now).as_dict()
        if report["archived"]:
            print(json.dumps(report), flush=True)
        return report

    return periodic("archive", args.every, step)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb archive run``."""
    archive = subparsers.add_parser(
        "archive",
        help="archive closed daily/weekly boards to Parquet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = archive.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run",
        help="archive every final board not archived yet (once, or periodically)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    when = run.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one pass, print its report, exit")
    when.add_argument(
        "--every", type=positive_float, default=300.0, help="seconds between passes (default 300)"
    )
    run.add_argument(
        "--dir", default=None, help="archive directory (default <LB_STATE_DIR>/archive)"
    )
    run.add_argument(
        "--margin",
        type=float,
        default=0.0,
        help="extra seconds to wait after a window's lateness grace before archiving it "
        "(set it above the streaming job's worst lag; default 0)",
    )
    run.set_defaults(handler=_archive_run)
