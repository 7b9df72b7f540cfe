"""The HTTP API on FastAPI/uvicorn against the hand-written server it replaced, in one run.

Four measurements, each a ratio or a percentile from the same run (the machine
is shared, so absolute figures are context):

1. **keep-alive top-10 latency**: 4 threads, each reusing one HTTP/1.1
   connection, ``GET /v1/leaderboards/g1/top?limit=10`` for a few seconds;
   p50/p99 of the new server and of the old one (git revision ``--old-rev``,
   checked out into a temporary worktree, removed at the end);
2. **top-10 requests/s** with ``wrk -t2 -c32`` against both;
3. **intake**: acknowledged ``POST /v1/scores`` per second with ``wrk -c32``
   (pre-signed distinct events, a wrk Lua script cycles through them; a 202
   means Kafka acknowledged the record), new and old;
4. **push latency**: the real job tails a topic; a producer writes background
   events at ``--rate`` events/s plus, every 100 ms, a "probe" event whose new
   best score takes rank 1; ``--subscribers`` WebSocket clients follow the
   top-10; the time from producing a probe to each subscriber receiving a page
   led by it, p50/p99 over every (probe, subscriber) pair.

Usage (services up: ``.venv/bin/lb up``; needs ``wrk``, see scripts/bootstrap.sh)::

    .venv/bin/python -m bench.http                       # ~2 min, writes its section
    .venv/bin/python -m bench.http --subscribers 200 --rate 2000 --no-doc

Every server listens on 127.0.0.1 and is stopped at the end, like the job;
the topic, the namespace and the old worktree are deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench.common import (
    GAME,
    ROOT,
    Job,
    Scratch,
    base_settings,
    job_env,
    log,
    machine,
    machine_line,
    percentile,
    publish,
    run_id,
)
from bench.formatting import fmt_int, fmt_ratio
from config.settings import Settings
from domain.events import ScoreEvent
from domain.signing import parse_keyring, signed_event
from schemas.codec import ScoreEventCodec

SECTION = "http"
#: The server this one replaced (the parent of the change that introduced FastAPI).
OLD_REV = "500980a"
SLOTS = 631_152_000  # all-time slots of a game with the default bounds
SEED_PLAYERS = 10_000
PROBE_EVERY_S = 0.1
TOP = "/v1/leaderboards/g1/top?limit=10"


def free_port() -> int:
    """A port nothing listens on right now (for a server started just after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_healthy(base: str, timeout_s: float = 60) -> None:
    """Wait until ``/healthz`` answers 200 (both servers have it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the server at {base} did not become healthy")
        time.sleep(0.2)


@contextmanager
def old_worktree(rev: str) -> Iterator[Path]:
    """``rev`` checked out into a temporary git worktree, removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix="oldapi-")) / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev],
        check=True,
        capture_output=True,
    )
    try:
        yield where
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)],
            check=False,
            capture_output=True,
        )


@contextmanager
def server(env: dict[str, str], cwd: Path, log_path: Path, workers: int = 1) -> Iterator[str]:
    """``lb serve`` of the checkout at ``cwd`` on a free loopback port; its base URL."""
    port = free_port()
    logf = log_path.open("wb")
    extra = ["--workers", str(workers)] if workers > 1 else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "serve", "--port", str(port), "--quiet", *extra],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(cwd)},
        stdout=logf,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        logf.close()


def keepalive_latency(base: str, seconds: float, connections: int = 4) -> dict[str, Any]:
    """p50/p99 of top-10 over ``connections`` kept-alive connections (one thread each)."""
    host, port = base.removeprefix("http://").split(":")
    samples: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        mine: list[float] = []
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            started = time.perf_counter()
            conn.request("GET", TOP)
            response = conn.getresponse()
            response.read()
            mine.append((time.perf_counter() - started) * 1000)
            assert response.status == 200, response.status
        conn.close()
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    samples.sort()
    return {
        "requests": len(samples),
        "p50_ms": percentile(samples, 50),
        "p99_ms": percentile(samples, 99),
    }


def wrk(url: str, connections: int, seconds: int, script: Path | None = None) -> dict[str, Any]:
    """Requests/s (2xx only) and wrk's latency line, from one ``wrk`` run."""
    argv = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if script is not None:
        argv += ["-s", str(script)]
    done = subprocess.run([*argv, url], capture_output=True, text=True, check=True)
    out = done.stdout
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    elapsed = re.search(r"requests in ([\d.]+)(m?s)", out)
    assert elapsed is not None, out
    secs = float(elapsed.group(1)) / (1000 if elapsed.group(2) == "ms" else 1)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    failed = int(bad.group(1)) if bad else 0
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return {
        "requests_per_s": (total - failed) / secs,
        "non_2xx": failed,
        "socket_errors": errors.group(1) if errors else None,
        "p99_ms": float(p99.group(1)) * scale[p99.group(2)] if p99 else None,
        "command": " ".join([*argv, url]),
    }


def signed_bodies(settings: Settings, count: int) -> list[str]:
    """Distinct signed score events as JSON bodies (the dev key of the settings)."""
    keyring = parse_keyring(settings.hmac_keys.reveal())
    key_id = next(iter(keyring.keys()))
    now = time.time_ns() // 1_000_000
    out = []
    for i in range(count):
        event = signed_event(
            keyring,
            key_id,
            event_id=f"bench-{uuid.uuid4().hex}",
            game_id=GAME,
            player_id=f"w{i % 5000}",
            score=i % 1000,
            ts_ms=now,
        )
        out.append(json.dumps(_body(event)))
    return out


def _body(event: ScoreEvent) -> dict[str, Any]:
    return {
        "eventId": event.event_id,
        "gameId": event.game_id,
        "playerId": event.player_id,
        "score": event.score,
        "timestamp": event.ts_ms,
        "kind": event.kind.value,
        "keyId": event.key_id,
        "sig": event.sig.hex(),
    }


def wrk_post_script(bodies: Sequence[str], path: Path) -> Path:
    """A wrk Lua script that POSTs the bodies in turn (each thread from its own offset)."""
    lua_bodies = ",\n".join("[==[" + body + "]==]" for body in bodies)
    path.write_text(
        "local bodies = {\n" + lua_bodies + "\n}\n"
        "local i = 0\n"
        "function setup(thread) thread:set('offset', math.random(#bodies)) end\n"
        "function init(args) i = offset or 0 end\n"
        "function request()\n"
        "  i = i % #bodies + 1\n"
        "  return wrk.format('POST', '/v1/scores', "
        "{['Content-Type'] = 'application/json'}, bodies[i])\n"
        "end\n"
    )
    return path


def seed_board(scratch: Scratch, namespace: str) -> None:
    """SEED_PLAYERS members on g1's all-time board, scores 1..SEED_PLAYERS."""
    key = f"{namespace}:{{{GAME}}}:alltime"
    members = {f"s{i:05d}": (i + 1) * SLOTS + (SLOTS - 1) for i in range(SEED_PLAYERS)}
    scratch.redis.zadd(key, members)


class ProbeProducer:
    """Background events at ``rate``/s plus a rank-1 probe every PROBE_EVERY_S."""

    def __init__(
        self, settings: Settings, topic: str, rate: int, seconds: float, first_probe: int
    ) -> None:
        self.first_probe = first_probe
        self.settings = settings
        self.topic = topic
        self.rate = rate
        self.seconds = seconds
        self.sent: dict[int, float] = {}  # probe score -> monotonic time produced
        self.background = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        keyring = parse_keyring(self.settings.hmac_keys.reveal())
        key_id = next(iter(keyring.keys()))
        codec = ScoreEventCodec.from_registry()
        producer = Producer({**self.settings.kafka_config(), "linger.ms": 2, "acks": "all"})
        rng = random.Random(3)
        start = time.monotonic()
        next_probe = start
        probe_score = self.first_probe
        while (now := time.monotonic()) < start + self.seconds:
            due = int((now - start) * self.rate)
            while self.background < due:
                self._send(
                    producer,
                    codec,
                    keyring,
                    key_id,
                    f"b{rng.randrange(50_000)}",
                    rng.randrange(SEED_PLAYERS // 2),
                )
                self.background += 1
            if now >= next_probe:
                probe_score += 1
                self.sent[probe_score] = time.monotonic()
                self._send(producer, codec, keyring, key_id, f"probe{probe_score}", probe_score)
                producer.poll(0)
                next_probe += PROBE_EVERY_S
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(30)

    def _send(
        self, producer: Producer, codec: Any, keyring: Any, key_id: str, player: str, score: int
    ) -> None:
        event = signed_event(
            keyring,
            key_id,
            event_id=uuid.uuid4().hex,
            game_id=GAME,
            player_id=player,
            score=score,
            ts_ms=time.time_ns() // 1_000_000,
        )
        while True:
            try:
                producer.produce(self.topic, codec.encode(event), player.encode())
                return
            except BufferError:
                producer.poll(0.01)


def leader_score(raw: str | bytes) -> int | None:
    """The rank-1 score of a ``top`` message, found without parsing the whole JSON.

    A thousand clients in one Python process must not spend the machine's CPU
    decoding pages: the server writes ``{"type":"top",...,"entries":[{"rank":1,
    "playerId":...,"score":N}`` so the first ``"score":`` after ``"entries":[{``
    is the leader's.
    """
    text = raw.decode() if isinstance(raw, bytes) else raw
    if not text.startswith('{"type":"top"'):
        return None
    at = text.find('"entries":[{')
    if at < 0:
        return None
    at = text.find('"score":', at)
    end = text.find("}", at)
    return int(text[at + 8 : end]) if at >= 0 and end > at else None


async def subscribe_all(
    base: str, count: int, seconds: float, sent: dict[int, float]
) -> tuple[list[float], int]:
    """``count`` WebSocket subscribers; latencies (ms) of probes reaching each, connected."""
    from websockets.asyncio.client import connect

    url = base.replace("http://", "ws://") + f"/v1/leaderboards/{GAME}/live?top=10&interval=50"
    latencies: list[float] = []
    connected = 0
    ready = asyncio.Event()

    async def one() -> None:
        nonlocal connected
        seen: set[int] = set()
        async with connect(url, open_timeout=60, max_queue=64) as ws:
            connected += 1
            if connected == count:
                ready.set()
            stop = time.monotonic() + seconds
            while (left := stop - time.monotonic()) > 0:
                try:
                    raw = await asyncio.wait_for(ws.recv(), left)
                except TimeoutError:
                    break
                arrived = time.monotonic()
                score = leader_score(raw)
                produced = sent.get(score) if score is not None else None
                if score is not None and produced is not None and score not in seen:
                    seen.add(score)
                    latencies.append((arrived - produced) * 1000)

    tasks = [asyncio.create_task(one()) for _ in range(count)]
    await asyncio.gather(*tasks, return_exceptions=False)
    return latencies, connected


def push_latency(
    settings: Settings, topic: str, base: str, subscribers: int, first_probe: int, args: Any
) -> dict[str, Any]:
    """Probe latency produce -> WebSocket with the job running and subscribers connected."""
    producer = ProbeProducer(settings, topic, args.rate, args.push_seconds, first_probe)
    result: dict[str, Any] = {}

    def run_clients() -> None:
        latencies, connected = asyncio.run(
            subscribe_all(base, subscribers, args.push_seconds + 15, producer.sent)
        )
        result["latencies"] = latencies
        result["connected"] = connected

    clients = threading.Thread(target=run_clients)
    clients.start()
    time.sleep(min(10.0, 2 + subscribers / 200))  # let the clients connect first
    producer.thread.start()
    producer.thread.join()
    clients.join()
    latencies = sorted(result.get("latencies", []))
    probes = len(producer.sent)
    return {
        "subscribers": subscribers,
        "connected": result.get("connected", 0),
        "rate_per_s": args.rate,
        "seconds": args.push_seconds,
        "probes": probes,
        "deliveries": len(latencies),
        "expected_deliveries": probes * subscribers,
        "background_events": producer.background,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": latencies[-1] if latencies else None,
    }


def markdown(summary: dict[str, Any]) -> str:
    """The BENCHMARKS.md section."""
    new, old = summary["new"], summary.get("old") or {}
    multi = summary.get("new_workers") or {}
    workers = summary.get("workers", 1)
    pushes = summary["push"]

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f} ms"

    def ratio(a: float | None, b: float | None) -> str:
        return fmt_ratio(a / b) if a and b else "-"

    rows = [
        (
            "keep-alive top-10 p50, 4 connections",
            ms(new["keepalive"]["p50_ms"]),
            ms(multi.get("keepalive", {}).get("p50_ms")),
            ms(old.get("keepalive", {}).get("p50_ms")),
            ratio(old.get("keepalive", {}).get("p50_ms"), new["keepalive"]["p50_ms"]),
        ),
        (
            "keep-alive top-10 p99, 4 connections",
            ms(new["keepalive"]["p99_ms"]),
            ms(multi.get("keepalive", {}).get("p99_ms")),
            ms(old.get("keepalive", {}).get("p99_ms")),
            ratio(old.get("keepalive", {}).get("p99_ms"), new["keepalive"]["p99_ms"]),
        ),
        (
            "top-10 requests/s, `wrk -t2 -c32`",
            fmt_int(new["wrk_top"]["requests_per_s"]),
            fmt_int(multi.get("wrk_top", {}).get("requests_per_s")),
            fmt_int(old.get("wrk_top", {}).get("requests_per_s")),
            ratio(new["wrk_top"]["requests_per_s"], old.get("wrk_top", {}).get("requests_per_s")),
        ),
        (
            "acknowledged events/s, 32 clients",
            fmt_int(new["intake"]["requests_per_s"]),
            fmt_int(multi.get("intake", {}).get("requests_per_s")),
            fmt_int(old.get("intake", {}).get("requests_per_s")),
            ratio(new["intake"]["requests_per_s"], old.get("intake", {}).get("requests_per_s")),
        ),
    ]
    table = "\n".join(f"| {a} | {b} | {m} | {c} | {d} |" for a, b, m, c, d in rows)
    header = (
        f"| measure | FastAPI + uvicorn | the same, `--workers {workers}` | old `http.server` "
        "| ratio (1 worker / old) |"
    )
    push_rows = "\n".join(
        f"| {p['subscribers']:,} ({p['connected']:,}) | {fmt_int(p['background_events'])} | "
        f"{ms(p['p50_ms'])} | {ms(p['p99_ms'])} | {ms(p['max_ms'])} | "
        f"{fmt_int(p['deliveries'])} of {fmt_int(p['expected_deliveries'])} |"
        for p in pushes
    )
    return f"""## HTTP API: FastAPI/uvicorn against the hand-written server (`bench/http.py`)

{machine_line(summary["machine"])}. Command: `{summary["command"]}`. The old server is
revision `{summary["old_rev"]}` (the `http.server` API), run from a temporary git worktree
against the same Redis board ({SEED_PLAYERS:,} players) and the same Kafka.

{header}
| --- | --- | --- | --- | --- |
{table}

Keep-alive: 4 threads, each reusing one connection for {summary["keepalive_seconds"]} s
({fmt_int(new["keepalive"]["requests"])} and {fmt_int(old.get("keepalive", {}).get("requests"))}
requests). Intake: `wrk -c32` cycling through {fmt_int(summary["bodies"])} distinct pre-signed
events; a 2xx means Kafka acknowledged the record (non-2xx: {new["intake"]["non_2xx"]} new,
{old.get("intake", {}).get("non_2xx", "-")} old).

**Live pushes**: the real job (`lb run`) on its own topic, WebSocket subscribers on
`/live?top=10&interval=50`, {fmt_int(pushes[0]["rate_per_s"])} background events/s for
{pushes[0]["seconds"]} s per row plus a rank-1 probe every {int(PROBE_EVERY_S * 1000)} ms;
latency from producing a probe to a subscriber receiving a page led by it, over every
(probe, subscriber) pair delivered (a subscriber may skip a probe when the next one beat
it to its next page):

| subscribers (connected) | background events | p50 | p99 | max | deliveries |
| --- | --- | --- | --- | --- | --- |
{push_rows}

The path includes the job's micro-batch (`LB_BATCH_MS`, 50 ms), Kafka, the Lua write and
its change-stream entry, one `XREAD` per stream, one shared top-10 read per batch of
changes and one send per subscriber. Everything (the producer, the job, Redis, Kafka, the
server and the clients, all in Python but Redis and Kafka) shares the machine's
{summary["machine"]["nproc"]} cores.
"""


def main(argv: list[str] | None = None) -> int:
    """Run the four measurements and publish them."""
    parser = argparse.ArgumentParser(prog="python -m bench.http", description=__doc__)
    parser.add_argument("--old-rev", default=OLD_REV, help="git revision of the old server")
    parser.add_argument("--keepalive-seconds", type=int, default=5)
    parser.add_argument("--wrk-seconds", type=int, default=10)
    parser.add_argument(
        "--subscribers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1000, 200],
        help="subscriber counts, one push run each (default 1000,200)",
    )
    parser.add_argument("--rate", type=int, default=5000, help="background events/s")
    parser.add_argument(
        "--workers", type=int, default=2, help="also measure `lb serve --workers N` (1: skip)"
    )
    parser.add_argument("--push-seconds", type=int, default=20)
    parser.add_argument("--no-doc", action="store_true", help="print the JSON only")
    parser.add_argument(
        "--push-only", action="store_true", help="only the push measurement (implies --no-doc)"
    )
    args = parser.parse_args(argv)

    settings = base_settings()
    rid = run_id()
    summary: dict[str, Any] = {
        "machine": machine(),
        "command": "python -m bench.http" + (" " + " ".join(argv or sys.argv[1:])).rstrip(),
        "old_rev": args.old_rev,
        "keepalive_seconds": args.keepalive_seconds,
    }
    with Scratch(settings, f"bench-http-{rid}") as scratch:
        topic = scratch.topic(f"bench-http-{rid}", 4)
        dlq = scratch.own_topic(f"{topic}.dlq")
        namespace = scratch.namespace(f"benchhttp{rid}")
        seed_board(scratch, namespace)
        env = job_env(settings, topic, dlq, namespace, scratch.state_dir)
        bodies = signed_bodies(settings, 20_000)
        summary["bodies"] = len(bodies)
        script = wrk_post_script(bodies, scratch.state_dir / "post.lua")

        def measure(base: str) -> dict[str, Any]:
            out = {"keepalive": keepalive_latency(base, args.keepalive_seconds)}
            log(f"{base}: keep-alive {out['keepalive']}")
            out["wrk_top"] = wrk(base + TOP, 32, args.wrk_seconds)
            log(f"{base}: wrk top {out['wrk_top']['requests_per_s']:.0f}/s")
            out["intake"] = wrk(base + "/v1/scores", 32, args.wrk_seconds, script)
            log(f"{base}: intake {out['intake']['requests_per_s']:.0f}/s")
            return out

        summary["workers"] = args.workers
        if not args.push_only:
            with server(env, ROOT, scratch.state_dir / "new.log") as base:
                summary["new"] = measure(base)
            if args.workers > 1:
                log_path = scratch.state_dir / "workers.log"
                with server(env, ROOT, log_path, workers=args.workers) as base:
                    summary["new_workers"] = measure(base)
        if args.old_rev and not args.push_only:
            with (
                old_worktree(args.old_rev) as tree,
                server(env, tree, scratch.state_dir / "old.log") as base,
            ):
                summary["old"] = measure(base)

        job = Job(
            [],
            job_env(settings, topic, dlq, namespace, scratch.state_dir),
            scratch.state_dir / "job.log",
        )
        scratch.jobs.append(job)
        with server(env, ROOT, scratch.state_dir / "push.log") as base:
            time.sleep(3)  # the job subscribes and catches up with the intake events
            summary["push"] = []
            for run, count in enumerate(args.subscribers):
                first_probe = 2 * SEED_PLAYERS + 100_000 * run  # above every earlier probe
                summary["push"].append(
                    push_latency(settings, topic, base, count, first_probe, args)
                )
                log(f"push: {summary['push'][-1]}")
        job.stop()
    delivered = all(push["deliveries"] for push in summary["push"])
    if args.push_only:
        return publish(SECTION, summary, markdown, delivered, False)
    verified = delivered and summary["new"]["intake"]["non_2xx"] == 0
    return publish(SECTION, summary, markdown, verified, not args.no_doc)


if __name__ == "__main__":
    sys.exit(main())
