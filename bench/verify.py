"""How long ``lb verify`` takes at 1M and 10M players, next to the ingest it audits.

Usage (from the repository root)::

    .venv/bin/python -m bench.verify [--players 1000000 10000000]

For each player count N: produces N signed records (one per player, game
``g1`` with its all-time, weekly and daily boards; the same input as
``bench.rebuild``), projects them with ``lb run --until-end``, then times
``lb verify --json --quiet`` (replay into a scratch namespace, compare 3N
members both ways, delete the scratch keys) from process start to exit. The
ratio to the ingest time of the same run is the headline: an audit costs
about one more replay plus the comparison. The run only publishes when
verify answered "equal" for every N. Progress on stderr, JSON on stdout;
everything it creates is deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from bench.common import (
    ROOT,
    Job,
    Scratch,
    base_settings,
    job_env,
    log,
    machine,
    machine_line,
    publish,
    run_id,
    table,
)
from bench.formatting import fmt_int, fmt_ratio
from bench.rebuild import PARTITIONS, _produce

SECTION = "bench.verify"


def _one(scratch: Scratch, players: int, seed: int) -> dict[str, Any]:
    settings = scratch.settings
    topic = scratch.topic(f"{scratch.prefix}-{players}", PARTITIONS)
    scratch.own_topic(f"{topic}.dlq")
    log(f"producing {players:,} players into {topic}")
    _produce(settings, topic, players, seed)
    namespace = scratch.namespace(f"{scratch.prefix}-{players}")
    env = job_env(settings, topic, f"{topic}.dlq", namespace, scratch.state_dir / str(players))
    job = Job(["--until-end"], env, scratch.state_dir / f"run-{players}.log")
    scratch.jobs.append(job)
    code = job.wait()
    ingest_s = time.monotonic() - job.started
    if code != 0:
        raise SystemExit(f"lb run --until-end exited {code}:\n{job.tail()}")
    log(f"{players:,}: ingest {ingest_s:.1f} s; verifying")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "lb.cli", "verify", "--json", "--quiet"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    verify_s = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"lb verify exited {done.returncode}:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout)
    log(f"{players:,}: verify {verify_s:.1f} s, equal={report['equal']}")
    scratch.drop_namespace(namespace)
    scratch.drop_topics([topic])
    return {
        "players": players,
        "ingest_seconds": round(ingest_s, 2),
        "verify_seconds": round(verify_s, 2),
        "records_per_s": round(report["records_replayed"] / verify_s),
        "members": report["members"],
        "members_per_s": round(report["members"] / verify_s),
        "ratio_to_ingest": round(verify_s / ingest_s, 3),
        "equal": report["equal"],
    }


def markdown(summary: dict[str, Any]) -> str:
    """The benchmark's section of docs/BENCHMARKS.md."""
    rows = [
        [
            fmt_int(r["players"]),
            f"{r['ingest_seconds']}",
            f"{r['verify_seconds']}",
            fmt_ratio(r["ratio_to_ingest"]),
            fmt_int(r["records_per_s"]),
            fmt_int(r["members"]),
            "equal" if r["equal"] else "**DIFFERENT**",
        ]
        for r in summary["sizes"]
    ]
    header = [
        "players",
        "lb run --until-end s",
        "lb verify s",
        "verify / ingest",
        "records/s replayed",
        "live members compared",
        "verdict",
    ]
    return f"""## Auditing the boards: `lb verify` (`bench/verify.py`)

Command: `{summary["command"]}`

Machine: {machine_line(summary["machine"])}

Input: one signed record per player (game `g1`: all-time, weekly and daily boards),
{PARTITIONS} partitions, projected by `lb run --until-end` (1 process). `lb verify` then
replays the topic into a scratch namespace with the job's code path (one process, no
Bytewax), compares every member of the 3 boards both ways and every counter, and deletes
its scratch keys; time is process start to exit.

{table(header, rows)}
"""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.verify", description=__doc__)
    parser.add_argument("--players", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--no-doc", action="store_true", help="do not touch docs/BENCHMARKS.md")
    args = parser.parse_args(argv)
    settings = base_settings()
    info = machine()
    prefix = f"bench-verify-{run_id()}"
    with Scratch(settings, prefix) as scratch:
        sizes = [_one(scratch, players, args.seed) for players in sorted(args.players)]
    summary: dict[str, Any] = {
        "benchmark": "verify",
        "command": (
            ".venv/bin/python -m bench.verify "
            + " ".join(argv if argv is not None else sys.argv[1:])
        ).strip(),
        "machine": info,
        "args": vars(args),
        "sizes": sizes,
    }
    return publish(SECTION, summary, markdown, all(s["equal"] for s in sizes), not args.no_doc)


if __name__ == "__main__":
    sys.exit(main())
