"""The HTTP API against its goals and the servers before it, in one run.

Four measurements, each a ratio or a percentile from the same run (the machine
is shared, so absolute figures are context; the CPU other processes used
meanwhile is recorded with them):

1. **keep-alive top-10 latency**: 4 threads, each reusing one HTTP/1.1
   connection, ``GET /v1/leaderboards/g1/top?limit=10`` for a few seconds;
   p50/p99 of this checkout's server (1 worker, the same with the page cache
   off, and ``--workers N``), of the FastAPI server before the work on the
   goals (``--before-rev``) and of the ``http.server`` one (``--old-rev``),
   each older revision checked out into a temporary worktree, removed at the end;
2. **top-10 requests/s** with ``wrk -t2 -c32`` against each;
3. **intake**: acknowledged ``POST /v1/scores`` per second with ``wrk -c32``
   (pre-signed distinct events, a wrk Lua script cycles through them; a 202
   means Kafka acknowledged the record);
4. **push latency**: the real job tails a topic; a producer writes background
   events at ``--rate`` events/s plus, every 100 ms, a "probe" event whose new
   best score takes rank 1; ``--subscribers`` WebSocket clients follow the
   top-10; the time from producing a probe to each subscriber receiving a page
   led by it, p50/p99 over every (probe, subscriber) pair, split where Redis
   appended the probe's change to the stream (the job's part, then the
   server's). This checkout's server at every count, the one before at the first.

Usage (services up: ``.venv/bin/lb up``; needs ``wrk``, see scripts/bootstrap.sh)::

    .venv/bin/python -m bench.http                       # ~2 min, writes its section
    .venv/bin/python -m bench.http --subscribers 200 --rate 2000 --no-doc

Every server listens on 127.0.0.1 and is stopped at the end, like the job;
the topic, the namespace and the old worktree are deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import multiprocessing
import os
import random
import re
import resource
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
from multiprocessing.connection import Connection
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
#: The FastAPI server before its hot routes, page cache and fan-out.
BEFORE_REV = "de4282a"
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
def server(
    env: dict[str, str],
    cwd: Path,
    log_path: Path,
    workers: int = 1,
    options: Sequence[str] = (),
) -> Iterator[str]:
    """``lb serve`` of the checkout at ``cwd`` on a free loopback port; its base URL."""
    port = free_port()
    logf = log_path.open("wb")
    extra = [*(["--workers", str(workers)] if workers > 1 else []), *options]
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
    """Background events at ``rate``/s plus a rank-1 probe every PROBE_EVERY_S.

    Every record is signed and encoded before the clock starts: the producer
    stands for game servers on other machines, and signing and encoding
    thousands of events a second in Python here took a tenth of this
    machine's two cores from the parts being measured. A probe's latency
    still starts when it is handed to the Kafka client.
    """

    def __init__(
        self, settings: Settings, topic: str, rate: int, seconds: float, first_probe: int
    ) -> None:
        self.first_probe = first_probe
        self.settings = settings
        self.topic = topic
        self.rate = rate
        self.seconds = seconds
        self.sent: dict[int, float] = {}  # probe score -> epoch second produced
        self.background = 0
        keyring = parse_keyring(settings.hmac_keys.reveal())
        key_id = next(iter(keyring.keys()))
        codec = ScoreEventCodec.from_registry()
        rng = random.Random(3)

        def record(player: str, score: int) -> tuple[bytes, bytes]:
            event = signed_event(
                keyring,
                key_id,
                event_id=uuid.uuid4().hex,
                game_id=GAME,
                player_id=player,
                score=score,
                ts_ms=time.time_ns() // 1_000_000,
            )
            return codec.encode(event), player.encode()

        self.backgrounds = [
            record(f"b{rng.randrange(50_000)}", rng.randrange(SEED_PLAYERS // 2))
            for _ in range(int(rate * seconds) + rate)
        ]
        probes = int(seconds / PROBE_EVERY_S) + 10
        self.probes = [
            (score, record(f"probe{score}", score))
            for score in range(first_probe + 1, first_probe + 1 + probes)
        ]
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        producer = Producer({**self.settings.kafka_config(), "linger.ms": 2, "acks": "all"})
        probes = iter(self.probes)
        start = time.monotonic()
        next_probe = start
        while (now := time.monotonic()) < start + self.seconds:
            due = min(int((now - start) * self.rate), len(self.backgrounds))
            while self.background < due:
                self._send(producer, self.backgrounds[self.background])
                self.background += 1
            if now >= next_probe:
                score, probe = next(probes)
                self.sent[score] = time.time()
                self._send(producer, probe)
                producer.poll(0)
                next_probe += PROBE_EVERY_S
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(30)

    def _send(self, producer: Producer, record: tuple[bytes, bytes]) -> None:
        value, key = record
        while True:
            try:
                producer.produce(self.topic, value, key)
                return
            except BufferError:
                producer.poll(0.01)


def leader_score(raw: bytes) -> int | None:
    """The rank-1 score of a ``top`` message, found without parsing the whole JSON.

    A thousand clients in one Python process must not spend the machine's CPU
    decoding pages: the server writes ``{"type":"top",...,"entries":[{"rank":1,
    "playerId":...,"score":N}`` so the first ``"score":`` after ``"entries":[{``
    is the leader's.
    """
    if not raw.startswith(b'{"type":"top"'):
        return None
    at = raw.find(b'"entries":[{')
    if at < 0:
        return None
    at = raw.find(b'"score":', at)
    end = raw.find(b"}", at)
    return int(raw[at + 8 : end]) if at >= 0 and end > at else None


class Subscriber(asyncio.Protocol):
    """One WebSocket subscriber: the ``websockets`` Sans-I/O client on a bare transport.

    A thousand of them share one process with the machine they measure, so
    each costs only the library's handshake and frame parser, run where the
    bytes arrive: no task, queue or coroutine per message. A frame's arrival
    is the moment its bytes are read off the socket, not when a coroutine
    among a thousand gets its turn. Pings are answered and closes echoed by
    the library, as with its asyncio client.
    """

    def __init__(self, uri: str, first_probe: int, opened: asyncio.Future[None]) -> None:
        from websockets.client import ClientProtocol
        from websockets.uri import parse_uri

        self.conn = ClientProtocol(parse_uri(uri), max_size=2**20)
        self.opened = opened
        self.transport: asyncio.Transport | None = None
        self.best = first_probe - 1
        #: (leader score, epoch second) of every page led by a new probe, in order.
        self.arrivals: list[tuple[int, float]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.conn.send_request(self.conn.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        from websockets.frames import Frame, Opcode
        from websockets.protocol import State

        wall = time.time()
        self.conn.receive_data(data)
        for event in self.conn.events_received():
            if isinstance(event, Frame):
                if event.opcode is Opcode.TEXT:
                    score = leader_score(bytes(event.data))
                    if score is not None and score > self.best:
                        self.best = score
                        self.arrivals.append((score, wall))
            elif not self.opened.done():  # the handshake's answer
                if self.conn.state is State.OPEN:
                    self.opened.set_result(None)
                else:
                    self.opened.set_exception(ConnectionError(f"refused: {event}"))
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc or ConnectionError("closed before the handshake"))

    def _flush(self) -> None:
        assert self.transport is not None
        for data in self.conn.data_to_send():
            if data:
                self.transport.write(data)
            elif self.transport.can_write_eof():
                self.transport.write_eof()


async def subscribe_all(
    base: str, count: int, seconds: float, first_probe: int
) -> tuple[list[list[tuple[int, float]]], int]:
    """``count`` WebSocket subscribers following the top 10 for ``seconds``.

    Returns, per subscriber, every page led by a new probe score (from
    ``first_probe`` on) with the epoch second it arrived; and how many
    subscribers connected.
    """
    url = base.replace("http://", "ws://") + f"/v1/leaderboards/{GAME}/live?top=10&interval=50"
    host, port = base.removeprefix("http://").rsplit(":", 1)
    loop = asyncio.get_running_loop()

    async def one() -> Subscriber:
        opened: asyncio.Future[None] = loop.create_future()
        _, subscriber = await loop.create_connection(
            lambda: Subscriber(url, first_probe, opened), host, int(port)
        )
        async with asyncio.timeout(60):
            await opened
        return subscriber

    started = await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
    subscribers = [s for s in started if isinstance(s, Subscriber)]
    await asyncio.sleep(seconds)
    for subscriber in subscribers:
        if subscriber.transport is not None:
            subscriber.transport.close()
    return [s.arrivals for s in subscribers], len(subscribers)


def _subscribers_process(
    base: str, count: int, seconds: float, first_probe: int, results: Connection
) -> None:
    """:func:`subscribe_all` in a process of its own, on uvloop.

    The clients share the machine with what they measure: in their own
    process they do not wait for the GIL behind the probe producer, and
    uvloop reads their sockets at a fraction of the default loop's cost.
    """
    import uvloop

    results.send(uvloop.run(subscribe_all(base, count, seconds, first_probe)))
    results.close()


def probe_deliveries(
    sent: dict[int, float], arrivals: list[list[tuple[int, float]]]
) -> list[tuple[int, float]]:
    """(probe score, epoch second its subscriber first saw it) for every pair that saw it.

    A subscriber sees a probe with the first page led by that probe *or a
    later one* (a later probe outranks it, so that page already reflects
    it): a subscriber that fell behind and skipped a probe's own page is
    counted at the page that caught up, not left out of the percentiles.
    """
    probes = sorted(sent)
    out: list[tuple[int, float]] = []
    for pages in arrivals:
        at = 0
        for score in probes:
            while at < len(pages) and pages[at][0] < score:
                at += 1
            if at == len(pages):
                break
            out.append((score, pages[at][1]))
    return out


def probe_writes(scratch: Scratch, namespace: str) -> dict[int, int]:
    """When Redis appended each probe's change (the stream id's milliseconds), by score.

    The job writes a board change and its stream entry in one atomic call, so
    this splits a push's latency into the job's part (produce -> board written)
    and the server's (board written -> subscriber received).
    """
    written: dict[int, int] = {}
    key = f"{namespace}:{{{GAME}}}:changes"
    last = "-"
    while True:
        entries: list[Any] = scratch.redis.xrange(key, last, "+", count=5000) or []
        if last != "-":
            entries = entries[1:]
        if not entries:
            return written
        for raw_id, fields in entries:
            ms = int(raw_id.decode().split("-")[0])
            for change in json.loads(fields[b"c"]):
                if change["p"].startswith("probe") and change["n"]:
                    written.setdefault(int(change["n"]), ms)
        last = entries[-1][0].decode()


def push_latency(
    settings: Settings,
    topic: str,
    base: str,
    subscribers: int,
    first_probe: int,
    args: Any,
    scratch: Scratch,
    namespace: str,
    job_pid: int,
) -> dict[str, Any]:
    """Probe latency produce -> WebSocket with the job running and subscribers connected.

    Also the cores each part used while the probes were produced: the server,
    the job, the clients, this process (the producer), Kafka and Redis, and
    the machine as a whole (``/proc/stat``).
    """
    producer = ProbeProducer(settings, topic, args.rate, args.push_seconds, first_probe)
    context = multiprocessing.get_context("spawn")
    results, sending = context.Pipe(duplex=False)
    clients = context.Process(
        target=_subscribers_process,
        args=(base, subscribers, args.push_seconds + 15, first_probe, sending),
    )
    clients.start()
    sending.close()
    time.sleep(min(10.0, 2 + subscribers / 200))  # let the clients connect first
    roles = {
        "server": [_listener_pid(base)],
        "job": [job_pid],
        "clients": [clients.pid or 0],
    }
    before, started = cpu_by_role(roles), time.monotonic()
    services_before = service_cpu()
    producer.thread.start()
    producer.thread.join()
    elapsed = time.monotonic() - started
    cores = {
        role: round((cpu - before[role]) / elapsed, 2) for role, cpu in cpu_by_role(roles).items()
    }
    services = service_cpu()
    # Per process, over those alive at both ends: one that exits meanwhile takes its
    # whole past CPU with it, which a sum by name would subtract from the others'.
    used = sum(
        cpu - services_before[pid] for pid, cpu in services.items() if pid in services_before
    )
    cores["kafka+redis"] = round(used / elapsed, 2)
    arrivals, connected = results.recv()  # when the clients end
    clients.join()
    sent = producer.sent
    deliveries = [
        (score, wall, (wall - sent[score]) * 1000)
        for score, wall in probe_deliveries(sent, arrivals)
    ]
    latencies = sorted(latency for _, _, latency in deliveries)
    written = probe_writes(scratch, namespace)
    job_part = sorted(
        written[score] - producer.sent[score] * 1000 for score in producer.sent if score in written
    )
    server_part = sorted(
        wall * 1000 - written[score] for score, wall, _ in deliveries if score in written
    )
    probes = len(producer.sent)
    return {
        "subscribers": subscribers,
        "connected": connected,
        "rate_per_s": args.rate,
        "seconds": args.push_seconds,
        "probes": probes,
        "deliveries": len(latencies),
        "expected_deliveries": probes * subscribers,
        "pages": sum(map(len, arrivals)),
        "background_events": producer.background,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": latencies[-1] if latencies else None,
        "probes_written": len(job_part),
        "job_p50_ms": percentile(job_part, 50),
        "job_p99_ms": percentile(job_part, 99),
        "fanout_p50_ms": percentile(server_part, 50),
        "fanout_p99_ms": percentile(server_part, 99),
        "cores": cores,
    }


def _listener_pid(base: str) -> int:
    """The process listening on ``base``'s port (the ``lb serve`` this run started)."""
    port = base.rsplit(":", 1)[1]
    found = subprocess.run(
        ["pgrep", "-f", "--", f"lb.cli serve --port {port}"], capture_output=True, text=True
    ).stdout.split()
    return int(found[0]) if found else 0


def own_cpu_s() -> float:
    """CPU seconds of this process so far (its threads, not its children)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_by_role(roles: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far of each role's processes and their descendants.

    Plus ``producer`` (this process alone) and ``machine`` (every core's busy
    time, from ``/proc/stat``).
    """
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[str, int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := OtherLoad.stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)

    def tree(pid: int) -> float:
        return (
            stats[pid][2] + sum(tree(child) for child in children.get(pid, []))
            if pid in stats
            else 0.0
        )

    out = {role: sum(tree(pid) for pid in pids) for role, pids in roles.items()}
    out["producer"] = own_cpu_s()  # this process alone: its children are the other roles
    busy = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    out["machine"] = (sum(busy) - busy[3] - busy[4]) / ticks  # all but idle and iowait
    return out


def service_cpu() -> dict[int, float]:
    """CPU seconds so far of each Kafka and Redis process, by pid."""
    stats = (
        (int(entry.name), OtherLoad.stat(int(entry.name)))
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit()
    )
    return {
        pid: stat[2] for pid, stat in stats if stat is not None and stat[0] in OtherLoad.SERVICES
    }


class OtherLoad:
    """The CPU other processes used while the benchmark ran (the machine is shared).

    Samples ``/proc`` every second; a process counts as ours when the benchmark
    is among its ancestors. Kafka and Redis are reported apart: the benchmark
    loads them itself, as others may.
    """

    SERVICES = ("java", "redis-server")

    def __init__(self) -> None:
        self._me = os.getpid()
        self._first: dict[int, tuple[str, float]] = {}
        self._last: dict[int, float] = {}
        self._ours: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()
        self.load_at_start = [round(x, 2) for x in os.getloadavg()]

    @staticmethod
    def stat(pid: int) -> tuple[str, int, float] | None:
        """A process's name, parent and CPU seconds so far; None once it is gone."""
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2 :].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return name, int(rest[1]), (int(rest[11]) + int(rest[12])) / ticks

    def sample(self) -> None:
        stats = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and (stat := self.stat(int(entry.name))) is not None:
                stats[int(entry.name)] = stat
        for pid, (name, _, cpu) in stats.items():
            chain, seen = pid, 0
            while chain > 1 and seen < 64:
                if chain == self._me or chain in self._ours:
                    self._ours.add(pid)
                    break
                chain = stats[chain][1] if chain in stats else 0
                seen += 1
            self._first.setdefault(pid, (name, cpu))
            self._last[pid] = cpu

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def __enter__(self) -> OtherLoad:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def summary(self) -> dict[str, Any]:
        """CPU seconds of others and of the shared services, and the load average."""
        others: dict[str, float] = {}
        services = 0.0
        for pid, (name, first) in self._first.items():
            used = self._last.get(pid, first) - first
            if pid in self._ours or pid == self._me or used <= 0:
                continue
            if name in self.SERVICES:
                services += used
            else:
                others[name] = others.get(name, 0.0) + used
        elapsed = time.monotonic() - self.started
        busiest = sorted(others.items(), key=lambda item: -item[1])[:3]
        return {
            "seconds": round(elapsed, 1),
            "loadavg_at_start": self.load_at_start,
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
            "others_cpu_s": round(sum(others.values()), 1),
            "others_busiest": [[name, round(cpu, 1)] for name, cpu in busiest],
            "services_cpu_s": round(services, 1),
        }


#: The API's goals, measured in one run on this machine.
GOAL_P99_MS = 2.0
GOAL_TOP_PER_S = 5000
GOAL_INTAKE_PER_S = 5000
GOAL_PUSH_P99_MS = 300.0
GOAL_PUSH_SUBSCRIBERS = 1000
GOAL_PUSH_RATE = 5000


PUSH_HEADER = (
    "| server | subscribers (connected) | p50 | p99 | max | deliveries "
    "| job: produce -> written, p50 / p99 | server: written -> received, p50 / p99 "
    "| cores: server, job, clients, producer, Kafka+Redis (machine) |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def _cores(cores: dict[str, float] | None) -> str:
    if not cores:
        return "-"
    parts = ("server", "job", "clients", "producer", "kafka+redis")
    return ", ".join(f"{cores.get(part, 0):.2f}" for part in parts) + f" ({cores['machine']:.2f})"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _get(doc: dict[str, Any], *path: str) -> Any:
    """``doc[a][b]...`` or None where a level is missing (a server not measured)."""
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def verdicts(summary: dict[str, Any]) -> dict[str, str]:
    """Each goal: met or not, and by which configuration (1 worker first)."""
    workers = summary.get("workers", 1)

    def judge(path: tuple[str, ...], ok: Any) -> str:
        configs = [("1 worker", "new"), (f"`--workers {workers}`", "new_workers")]
        met = [name for name, key in configs if (v := _get(summary, key, *path)) and ok(v)]
        if not met:
            return "**not met**"
        return "**met** (" + (", ".join(met) if len(met) > 1 else f"{met[0]} only") + ")"

    at_load = [
        p
        for p in summary.get("push", [])
        if p["subscribers"] >= GOAL_PUSH_SUBSCRIBERS and p["rate_per_s"] >= GOAL_PUSH_RATE
    ]
    if not at_load:
        push = "not measured at the goal's load"
    elif all(p["p99_ms"] is not None and p["p99_ms"] <= GOAL_PUSH_P99_MS for p in at_load):
        push = "**met**"
    else:
        push = "**not met**"
    return {
        "keepalive": judge(("keepalive", "p99_ms"), lambda v: v <= GOAL_P99_MS),
        "top": judge(("wrk_top", "requests_per_s"), lambda v: v >= GOAL_TOP_PER_S),
        "intake": judge(("intake", "requests_per_s"), lambda v: v >= GOAL_INTAKE_PER_S),
        "push": push,
    }


def markdown(summary: dict[str, Any]) -> str:
    """The BENCHMARKS.md section."""
    workers = summary.get("workers", 1)
    columns = [
        ("new, 1 worker", "new"),
        ("new, page cache off", "new_no_cache"),
        (f"new, `--workers {workers}`", "new_workers"),
        (f"before (`{summary.get('before_rev') or '-'}`)", "before"),
        (f"old `http.server` (`{summary['old_rev']}`)", "old"),
    ]
    columns = [(title, key) for title, key in columns if summary.get(key)]
    goal = verdicts(summary)
    measures = [
        ("keep-alive top-10 p50, 4 connections", "-", ("keepalive", "p50_ms"), _ms),
        (
            "keep-alive top-10 p99, 4 connections",
            f"<= {GOAL_P99_MS:g} ms: {goal['keepalive']}",
            ("keepalive", "p99_ms"),
            _ms,
        ),
        (
            "top-10 requests/s, `wrk -t2 -c32`",
            f">= {GOAL_TOP_PER_S:,}: {goal['top']}",
            ("wrk_top", "requests_per_s"),
            fmt_int,
        ),
        ("top-10 p99 under `wrk -c32`", "-", ("wrk_top", "p99_ms"), _ms),
        (
            "acknowledged events/s, 32 clients",
            f">= {GOAL_INTAKE_PER_S:,}: {goal['intake']}",
            ("intake", "requests_per_s"),
            fmt_int,
        ),
        ("intake p99 under `wrk -c32`", "-", ("intake", "p99_ms"), _ms),
    ]
    header = "| measure | goal | " + " | ".join(title for title, _ in columns) + " | new / before |"
    lines = [header, "|" + " --- |" * (len(columns) + 3)]
    for label, target, path, show in measures:
        cells = [show(_get(summary, key, *path)) for _, key in columns]
        new, before = _get(summary, "new", *path), _get(summary, "before", *path)
        lower_is_better = path[-1].endswith("_ms")
        ratio = "-"
        if new and before:
            ratio = fmt_ratio(before / new if lower_is_better else new / before)
        lines.append(f"| {label} | {target} | " + " | ".join(cells) + f" | {ratio} |")
    table = "\n".join(lines)

    push_rows = []
    for key, title in (("push", "new"), ("push_before", "before")):
        for p in summary.get(key, []):
            push_rows.append(
                f"| {title} | {p['subscribers']:,} ({p['connected']:,}) | "
                f"{_ms(p['p50_ms'])} | {_ms(p['p99_ms'])} | {_ms(p['max_ms'])} | "
                f"{fmt_int(p['deliveries'])} of {fmt_int(p['expected_deliveries'])} | "
                f"{_ms(p.get('job_p50_ms'))} / {_ms(p.get('job_p99_ms'))} | "
                f"{_ms(p.get('fanout_p50_ms'))} / {_ms(p.get('fanout_p99_ms'))} | "
                f"{_cores(p.get('cores'))} |"
            )
    pushes = summary["push"]
    first = pushes[0]
    load = summary.get("load") or {}
    busiest = ", ".join(f"{name} {cpu:g} s" for name, cpu in load.get("others_busiest", []))
    load_line = (
        f"Load average {', '.join(map(str, load.get('loadavg_at_start', [])))} at start, "
        f"{', '.join(map(str, load.get('loadavg_at_end', [])))} at the end of the "
        f"{load.get('seconds', '?')} s run; processes outside the benchmark used "
        f"{load.get('others_cpu_s', '?')} CPU-seconds meanwhile"
        + (f" (busiest: {busiest})" if busiest else "")
        + f", Kafka and Redis {load.get('services_cpu_s', '?')} (theirs and ours)."
        if load
        else ""
    )
    new = summary.get("new") or {}
    before_push = (summary.get("push_before") or [{}])[0]
    no_cache = summary.get("new_no_cache") or {}
    multi = summary.get("new_workers") or {}
    return f"""## HTTP API: FastAPI/uvicorn against the servers before it (`bench/http.py`)

{machine_line(summary["machine"])}. Command: `{summary["command"]}`. {load_line}
"Before" is revision `{summary.get("before_rev") or "-"}` (the FastAPI server without
the hot routes, page cache and fan-out) and "old" revision `{summary["old_rev"]}`
(the `http.server` API),
each run from a temporary git worktree against the same Redis board ({SEED_PLAYERS:,}
players) and the same Kafka; every server gets one read and one submission before it is
measured.

{table}

Keep-alive: 4 threads, each reusing one connection for {summary["keepalive_seconds"]} s
({fmt_int(_get(new, "keepalive", "requests"))} requests on the new server). Intake:
`wrk -c32` cycling through {fmt_int(summary["bodies"])} distinct pre-signed events, one per
request; a 2xx means Kafka acknowledged the record (non-2xx on the new server:
{_get(new, "intake", "non_2xx")}). "Page cache off" is `lb serve --page-cache-ms 0`: every
read goes to Redis.

**Live pushes**: the real job (`lb run`, `LB_BATCH_MS={summary.get("batch_ms", 50)}`) on its
own topic, WebSocket subscribers on `/live?top=10&interval=50`,
{fmt_int(first["rate_per_s"])} background events/s for {first["seconds"]} s per row plus a
rank-1 probe every {int(PROBE_EVERY_S * 1000)} ms; latency from producing a probe to a
subscriber receiving a page that shows it, over every (probe, subscriber) pair: the first
page led by that probe or a later one (which outranks it, so the page already reflects
it). A subscriber that fell behind and skipped a probe's own page counts at the page that
caught up; "deliveries" counts the pairs that saw their probe at all. `interval=50` is the
smallest a subscriber may ask for; probes come every {int(PROBE_EVERY_S * 1000)} ms, so a
subscriber that keeps up is never throttled, while the default 250 ms would add up to
250 ms of deliberate wait (a change after a quiet interval goes at once, later ones at
its end). The clients are the `websockets` library's Sans-I/O client on bare uvloop
transports in one process of their own; a page's arrival is when its bytes are parsed off
the socket. The job's part
ends when Redis appended the probe's change to the stream (the entry id's milliseconds; the
board is written in the same atomic call); the server's part is the rest, clients included.
Goal: p99 <= {GOAL_PUSH_P99_MS:g} ms at {GOAL_PUSH_SUBSCRIBERS:,} subscribers and
{GOAL_PUSH_RATE:,} events/s: {goal["push"]}.

{PUSH_HEADER}
{chr(10).join(push_rows)}

### What the figures say

- **Reads.** A well-formed `top` no longer walks FastAPI's middleware, routing and
  dependency injection (`api/hot.py` answers it with the same model and reader; anything
  unusual still goes to the FastAPI route), and a page is served from the per-process cache
  until the change stream says it may have changed (`api/pages.py`). With the cache:
  {fmt_int(_get(new, "wrk_top", "requests_per_s"))} requests/s on 1 worker; without it
  {fmt_int(_get(no_cache, "wrk_top", "requests_per_s"))}/s, where a Redis round trip through
  redis-py and building the page cost about as much as the rest of the request. What
  remains per cached request is uvicorn's HTTP/1.1 handling (parsing, a task per request,
  two socket writes per response: head and body) and the metrics middleware.
- **Keep-alive latency** at 4 connections (the client: 4 Python threads sharing one
  interpreter): p50 {_ms(_get(new, "keepalive", "p50_ms"))}, p99
  {_ms(_get(new, "keepalive", "p99_ms"))} on 1 worker; {_ms(_get(multi, "keepalive", "p99_ms"))}
  on {workers} workers, whose processes compete for the same 2 cores with the client, Redis
  and the rest of the machine (see the load line above).
- **Intake.** Each request is validated by the same model as before, checked, Avro-encoded
  and produced without FastAPI's per-request machinery, and the Kafka client's delivery
  reports are served on the event loop (`poll(0)` every 0.5 ms while records are
  outstanding) instead of a thread that woke the loop once per record (those wake-ups and
  GIL hand-overs cost more than the rest of the request). Every answer still waits for
  its own acknowledgement; there is no lock. {fmt_int(_get(new, "intake", "requests_per_s"))}
  events/s on 1 worker, {fmt_int(_get(multi, "intake", "requests_per_s"))} on {workers}
  (two producers, two processes and `wrk` on two cores). `linger.ms` stays 1: 0 and 5
  both gave fewer acknowledged events/s in a side-by-side trial.
- **Pushes.** The hub reads a watch's page once, frames it once (the `websockets`
  library's serialisation; no `permessage-deflate`) and, for every subscriber whose task
  is idle and whose interval has passed, writes that frame to its connection itself: no
  task wake-up, ASGI message or deadline timer per subscriber (`api/ws_frames.py`,
  `Subscription.push_now`). Anything that must wait (a throttled push, a full socket
  buffer, a rank, SSE) still goes through the subscriber's own task. At
  {first["subscribers"]:,} subscribers the job's part is p50
  {_ms(first.get("job_p50_ms"))} / p99 {_ms(first.get("job_p99_ms"))} (its micro-batch closes
  {summary.get("batch_ms", 50)} ms after its first record; then decoding, verification and
  planning) and the server's part, clients included, p50
  {_ms(first.get("fanout_p50_ms"))} / p99 {_ms(first.get("fanout_p99_ms"))}; end to end p99
  {_ms(first.get("p99_ms"))} against {_ms(before_push.get("p99_ms"))} before. While the probes
  were produced the parts used these cores: {_cores(first.get("cores"))}, in the order of the
  table's last column: the load generator itself ({fmt_int(first["rate_per_s"])} signed
  events/s and {first["subscribers"]:,} clients) takes its share of the
  {summary["machine"]["nproc"]} cores, and every part queues for what is left. The job's
  batch interval is the job's setting and was not changed here.
"""


def warm_up(base: str, body: str) -> None:
    """One read and one submission before measuring (the producer connects on the first)."""
    for request in (
        urllib.request.Request(base + TOP),
        urllib.request.Request(
            base + "/v1/scores",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        ),
    ):
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
        except OSError as exc:
            log(f"{base}: warm-up {request.full_url}: {exc}")


def main(argv: list[str] | None = None) -> int:
    """Run the four measurements and publish them."""
    parser = argparse.ArgumentParser(prog="python -m bench.http", description=__doc__)
    parser.add_argument("--old-rev", default=OLD_REV, help="git revision of the old server")
    parser.add_argument(
        "--before-rev",
        default=BEFORE_REV,
        help="git revision of the FastAPI server before its hot routes ('' to skip)",
    )
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
        "before_rev": args.before_rev,
        "keepalive_seconds": args.keepalive_seconds,
        "batch_ms": settings.batch_ms,
    }
    with OtherLoad() as load, Scratch(settings, f"bench-http-{rid}") as scratch:
        topic = scratch.topic(f"bench-http-{rid}", 4)
        dlq = scratch.own_topic(f"{topic}.dlq")
        namespace = scratch.namespace(f"benchhttp{rid}")
        seed_board(scratch, namespace)
        env = job_env(settings, topic, dlq, namespace, scratch.state_dir)
        bodies = signed_bodies(settings, 20_000)
        summary["bodies"] = len(bodies)
        script = wrk_post_script(bodies, scratch.state_dir / "post.lua")

        def measure(base: str, *, intake: bool = True) -> dict[str, Any]:
            warm_up(base, bodies[0])
            out = {"keepalive": keepalive_latency(base, args.keepalive_seconds)}
            log(f"{base}: keep-alive {out['keepalive']}")
            out["wrk_top"] = wrk(base + TOP, 32, args.wrk_seconds)
            log(f"{base}: wrk top {out['wrk_top']['requests_per_s']:.0f}/s")
            if intake:
                out["intake"] = wrk(base + "/v1/scores", 32, args.wrk_seconds, script)
                log(f"{base}: intake {out['intake']['requests_per_s']:.0f}/s")
            return out

        summary["workers"] = args.workers
        if not args.push_only:
            with server(env, ROOT, scratch.state_dir / "new.log") as base:
                summary["new"] = measure(base)
            no_cache = ["--page-cache-ms", "0"]
            with server(env, ROOT, scratch.state_dir / "nocache.log", options=no_cache) as base:
                summary["new_no_cache"] = measure(base, intake=False)
            if args.workers > 1:
                log_path = scratch.state_dir / "workers.log"
                with server(env, ROOT, log_path, workers=args.workers) as base:
                    summary["new_workers"] = measure(base)
            for name, rev in (("before", args.before_rev), ("old", args.old_rev)):
                if rev:
                    with (
                        old_worktree(rev) as tree,
                        server(env, tree, scratch.state_dir / f"{name}.log") as base,
                    ):
                        summary[name] = measure(base)

        job = Job(
            [],
            job_env(settings, topic, dlq, namespace, scratch.state_dir),
            scratch.state_dir / "job.log",
        )
        scratch.jobs.append(job)
        # The new server at every subscriber count, then the one before at the first.
        runs = [("push", count) for count in args.subscribers]
        if args.before_rev:
            runs.append(("push_before", args.subscribers[0]))
        summary["push"], summary["push_before"] = [], []
        for run, (key, count) in enumerate(runs):
            first_probe = 2 * SEED_PLAYERS + 100_000 * run  # above every earlier probe
            with contextlib.ExitStack() as stack:
                tree = ROOT
                if key == "push_before":
                    tree = stack.enter_context(old_worktree(args.before_rev))
                base = stack.enter_context(server(env, tree, scratch.state_dir / f"push{run}.log"))
                time.sleep(3)  # the job subscribes and catches up with the intake events
                summary[key].append(
                    push_latency(
                        settings,
                        topic,
                        base,
                        count,
                        first_probe,
                        args,
                        scratch,
                        namespace,
                        job.proc.pid,
                    )
                )
            log(f"{key}: {summary[key][-1]}")
        job.stop()
    summary["load"] = load.summary()
    delivered = all(push["deliveries"] for push in summary["push"])
    if args.push_only:
        return publish(SECTION, summary, markdown, delivered, False)
    verified = delivered and summary["new"]["intake"]["non_2xx"] == 0
    return publish(SECTION, summary, markdown, verified, not args.no_doc)


if __name__ == "__main__":
    sys.exit(main())
