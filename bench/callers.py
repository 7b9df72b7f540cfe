"""What checking callers costs the hot read, and whether one client's burst slows another.

Two measurements, each a ratio from the same run (the machine is shared):

1. **top-10 keep-alive p99 with authentication and rate limits on, and off**: two
   ``lb serve`` processes of this checkout on the same seeded board, one with
   nothing configured, one with ``LB_API_READS=authenticated`` (HS256 player
   tokens and an API key file) and ``LB_RATE_READS`` high enough never to
   refuse (every request still counted in Redis), measured at the same time
   (so a change in the machine's load hits both): 2 threads on each, each
   reusing one HTTP/1.1 connection and sending the same request with a token
   of its own player (the open server ignores it), over several rounds.
2. **a burst from one client**: the secured server with ``LB_RATE_READS=200/second``;
   a paced client (one connection, 100 requests/s, its own token) measures its
   p99 alone, then while another client hammers the same route from 4 connections
   with its own token (refused with 429 once over its limit), then the same
   burst against a server without the limit; the ratios of the p99s, and how
   many of the burst's requests were refused.

Usage (services up: ``.venv/bin/lb up``)::

    flock /tmp/lb-heavy.lock .venv/bin/python -m bench.callers          # ~1 min
    .venv/bin/python -m bench.callers --rounds 2 --round-seconds 3

Every server listens on 127.0.0.1 and is stopped at the end; the namespace is deleted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import jwt

from api.auth.keyfile import key_line, new_key
from bench.common import ROOT, Scratch, base_settings, job_env, log, machine, percentile, run_id
from bench.formatting import fmt_ratio
from bench.http import TOP, seed_board, server

SECRET = "bench-callers-secret-0123456789abcdef"
AUDIENCE, ISSUER = "leaderboard-api", "https://auth.bench.test"


def token(player: str) -> str:
    """A player token valid for an hour."""
    now = int(time.time())
    claims = {"sub": player, "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 3600}
    return jwt.encode(claims, SECRET, algorithm="HS256")


def timed_requests(
    base: str,
    seconds: float,
    tokens: Sequence[str | None],
    pace_s: float = 0.0,
    statuses: dict[int, int] | None = None,
) -> list[float]:
    """Latencies (ms) of top-10 requests, one kept-alive connection per entry of ``tokens``."""
    host, port = base.removeprefix("http://").split(":")
    samples: list[float] = []
    lock = threading.Lock()

    def worker(bearer: str | None) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        mine: list[float] = []
        seen: dict[int, int] = {}
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            started = time.perf_counter()
            conn.request("GET", TOP, headers=headers)
            response = conn.getresponse()
            response.read()
            mine.append((time.perf_counter() - started) * 1000)
            seen[response.status] = seen.get(response.status, 0) + 1
            if pace_s:
                time.sleep(max(0.0, pace_s - (time.perf_counter() - started)))
        conn.close()
        with lock:
            samples.extend(mine)
            if statuses is not None:
                for status, count in seen.items():
                    statuses[status] = statuses.get(status, 0) + count

    threads = [threading.Thread(target=worker, args=(bearer,)) for bearer in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return samples


def summary_of(samples: list[float]) -> dict[str, Any]:
    """Count, p50 and p99 of latencies in ms."""
    ordered = sorted(samples)
    return {
        "requests": len(ordered),
        "p50_ms": percentile(ordered, 50),
        "p99_ms": percentile(ordered, 99),
    }


def _both_at_once(
    servers: dict[str, str], seconds: float, players: list[str]
) -> dict[str, tuple[list[float], dict[int, int]]]:
    """Latencies and statuses of each server, measured at the same time."""
    out: dict[str, tuple[list[float], dict[int, int]]] = {}

    def run(name: str, base: str) -> None:
        statuses: dict[int, int] = {}
        out[name] = (timed_requests(base, seconds, players, statuses=statuses), statuses)

    threads = [threading.Thread(target=run, args=item) for item in servers.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def overhead(off: str, on: str, rounds: int, seconds: float) -> dict[str, Any]:
    """Measurement 1: both servers at once, 2 connections each, the same requests."""
    pooled: dict[str, list[float]] = {"off": [], "on": []}
    for round_ in range(rounds):
        players = [token(f"reader{round_}-{i}") for i in range(2)]
        done = _both_at_once({"off": off, "on": on}, seconds, players)
        for name, (samples, statuses) in done.items():
            assert set(statuses) == {200}, statuses  # only the cost is measured
            pooled[name] += samples
        log(f"round {round_ + 1}: " + ", ".join(f"{n} {summary_of(done[n][0])}" for n in done))
    out = {name: summary_of(samples) for name, samples in pooled.items()}
    out["p99_ratio"] = out["on"]["p99_ms"] / out["off"]["p99_ms"]
    out["p50_ratio"] = out["on"]["p50_ms"] / out["off"]["p50_ms"]
    return out


def beside_burst(base: str, seconds: float) -> dict[str, Any]:
    """A paced client's latencies while another client hammers the same route."""
    statuses: dict[int, int] = {}
    result: dict[str, list[float]] = {}

    def hammer() -> None:
        result["burst"] = timed_requests(base, seconds, [token("burst")] * 4, statuses=statuses)

    thread = threading.Thread(target=hammer)
    thread.start()
    time.sleep(0.2)
    paced = summary_of(timed_requests(base, seconds - 0.4, [token("paced")], pace_s=0.01))
    thread.join()
    return {
        **paced,
        "burst_statuses": {str(k): v for k, v in sorted(statuses.items())},
        "burst_requests_per_s": len(result["burst"]) / seconds,
    }


def burst(limited: str, unlimited: str, seconds: float) -> dict[str, Any]:
    """Measurement 2: a paced client's p99 alone, beside a limited and an unlimited burst."""
    alone = summary_of(timed_requests(limited, seconds, [token("paced")], pace_s=0.01))
    with_limits = beside_burst(limited, seconds)
    without_limits = beside_burst(unlimited, seconds)
    return {
        "alone": alone,
        "beside_limited_burst": with_limits,
        "beside_unlimited_burst": without_limits,
        "p99_ratio": with_limits["p99_ms"] / alone["p99_ms"],
        "p99_ratio_vs_unlimited": with_limits["p99_ms"] / without_limits["p99_ms"],
    }


def main(argv: list[str] | None = None) -> int:
    """Run both measurements; the summary as JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.callers", description=__doc__)
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
    parser.add_argument("--round-seconds", type=float, default=5.0)
    parser.add_argument("--burst-seconds", type=float, default=6.0)
    args = parser.parse_args(argv)

    settings = base_settings()
    rid = run_id()
    summary: dict[str, Any] = {
        "machine": machine(),
        "command": "python -m bench.callers" + (" " + " ".join(argv or sys.argv[1:])).rstrip(),
    }
    with Scratch(settings, f"bench-callers-{rid}") as scratch:
        namespace = scratch.namespace(f"benchcallers{rid}")
        seed_board(scratch, namespace)
        keys = scratch.state_dir / "api-keys"
        keys.write_text(key_line("bench", new_key()) + "\n")
        env = job_env(settings, "bench-callers", "bench-callers.dlq", namespace, scratch.state_dir)
        secured = {
            **env,
            "LB_API_READS": "authenticated",
            "LB_API_KEYS": str(keys),
            "LB_JWT_SECRET": SECRET,
            "LB_JWT_AUDIENCE": AUDIENCE,
            "LB_JWT_ISSUER": ISSUER,
        }
        unlimited = {**secured, "LB_RATE_READS": "1000000/second"}
        with (
            server(env, ROOT, scratch.state_dir / "off.log") as off,
            server(unlimited, ROOT, scratch.state_dir / "on.log") as on,
        ):
            summary["overhead"] = overhead(off, on, args.rounds, args.round_seconds)
        limited = {**secured, "LB_RATE_READS": "200/second"}
        with (
            server(limited, ROOT, scratch.state_dir / "limited.log") as base,
            server(unlimited, ROOT, scratch.state_dir / "unlimited.log") as open_base,
        ):
            summary["burst"] = burst(base, open_base, args.burst_seconds)
    o, b = summary["overhead"], summary["burst"]
    log(
        f"top-10 keep-alive p99: off {o['off']['p99_ms']:.2f} ms, on {o['on']['p99_ms']:.2f} ms "
        f"({fmt_ratio(o['p99_ratio'])}); paced client p99 alone {b['alone']['p99_ms']:.2f} ms, "
        f"beside a limited burst {b['beside_limited_burst']['p99_ms']:.2f} ms "
        f"({fmt_ratio(b['p99_ratio'])}), beside the same burst unlimited "
        f"{b['beside_unlimited_burst']['p99_ms']:.2f} ms"
    )
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
