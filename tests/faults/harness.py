"""What every fault test shares: private services, the job as a process, a feeder
that keeps producing through broker outages, and the exactly-once verdict.

The verdict is the conservation law of the job (every record in ends as a board
update, an idempotent no-op or a dead letter, each exactly once) plus boards
equal to the independent oracle of ``tests.integration.streams``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from adapters.kafka import header_map
from adapters.redis import RedisClient
from infra import services as svc
from tests.integration.streams import (
    REPO,
    Planned,
    oracle,
    oracle_with_metadata,
    produce_planned,
    read_boards,
    read_metadata,
    read_stats,
)
from tests.poll import poll

#: Private ports, below the ephemeral range and apart from the shared services
#: (29092/29093, 26379, 17101-17103), test_services (29592, 26979) and benchmarks.
KAFKA_PORT = 28192
REDIS_PORT = 28379
CLUSTER_BASE_PORT = 18101


@dataclass(frozen=True)
class Private:
    """Kafka and Redis of the fault suite alone: safe to stop, kill, stall and flush."""

    dirs: svc.ServiceDirs

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{KAFKA_PORT}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{REDIS_PORT}/0"

    def up(self) -> float:
        """Start whatever is down (idempotent); returns the seconds it took."""
        started = time.monotonic()
        svc.up(self.dirs, kafka_port=KAFKA_PORT, redis_port=REDIS_PORT)
        return time.monotonic() - started

    def stop(self, service: str, *, kill: bool = False) -> None:
        svc.stop_service(self.dirs, service, kill=kill)

    def pid(self, service: str) -> int:
        return int(svc.read_record(self.dirs)[f"{service}_pid"])


class Job:
    """``lb <args>`` in its own session; its output goes to a log file for diagnosis."""

    def __init__(self, env: dict[str, str], log_path: Path, args: tuple[str, ...] = ("run",)):
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lb.cli", *args],
                # SIGABRT then dumps every thread's stack into the log (see stop).
                env={**env, "PYTHONFAULTHANDLER": "1"},
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (a clean stop: flush and exit 0); SIGKILL if it does not stop in time."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            os.killpg(self.proc.pid, signal.SIGABRT)  # stacks into the log, for diagnosis
            time.sleep(2.0)
            self.kill()
            raise AssertionError(f"the job did not stop on SIGTERM:\n{self.log()[-6000:]}") from exc

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class Feeder(threading.Thread):
    """Produces ``records`` in chunks with pauses, so faults land while events arrive.

    One idempotent producer for the whole stream: it buffers and retries
    across a broker restart (``message.timeout.ms`` longer than any outage the
    tests inject) and keeps each partition's order, which the oracle relies on.
    Idempotence is not a promise of one copy, though: when a restart fails one
    in-flight request and the broker refuses the next ones' sequence numbers,
    librdkafka bumps the producer epoch and sends those batches again, and a
    batch the broker had already written lands twice. So :meth:`finish` reads
    the topic back and adds every extra copy to ``records`` where the log has
    it: the oracle then expects what a game backend's retries would give, a
    duplicate for a valid event and one dead letter per copy of a bad record.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        records: list[Planned],
        chunk: int,
        pause_s: float,
        started: Callable[[], bool] | None = None,
    ) -> None:
        """``started``: after the first chunk, wait for it (the job applying records), so a
        job's start-up, seconds on a loaded machine, does not eat the stream the faults
        must land in."""
        super().__init__(daemon=True)
        self._job_applying = started
        self._servers = bootstrap
        self._topic = topic
        self._records = records
        self._chunk = chunk
        self._pause_s = pause_s
        self.sent = 0
        self.errors: list[str] = []
        self.copies = 0

    def run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self._servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 10,
                "message.timeout.ms": 180_000,
                "log_level": 0,
            }
        )

        def delivered(rec: Planned) -> Callable[[Any, Any], None]:
            def callback(err: Any, msg: Any) -> None:
                if err is not None:
                    self.errors.append(str(err))
                else:
                    rec.partition, rec.offset = msg.partition(), msg.offset()

            return callback

        for at in range(0, len(self._records), self._chunk):
            for rec in self._records[at : at + self._chunk]:
                produce_planned(producer, self._topic, rec, delivered(rec))
                self.sent += 1
            producer.poll(0)
            if at == 0 and self._job_applying is not None:
                poll("the job applying the first chunk", self._job_applying, 180, every_s=0.1)
            time.sleep(self._pause_s)
        if producer.flush(180) != 0:
            self.errors.append("records left undelivered after 180 s")

    def finish(self, timeout_s: float = 240.0) -> None:
        """Wait for every record to be acknowledged (offsets known to the oracle)."""
        self.join(timeout=timeout_s)
        assert not self.is_alive(), "the feeder did not finish"
        assert not self.errors, self.errors[:3]
        assert all(rec.offset >= 0 for rec in self._records)
        self.copies = add_logged_copies(self._servers, self._topic, self._records)


def add_logged_copies(bootstrap: str, topic: str, records: list[Planned]) -> int:
    """Put the topic's extra copies of planned records into ``records``, in log order.

    A copy is a record at an offset no delivery report named, with the key,
    value and timestamp of a planned one; it takes that record's expected
    outcome and goes in right after the last record its partition's log has
    before it, which keeps each player's order (a player's records share a
    partition) and each partition's log order (tournament seats). Returns the
    number of copies. Any other record in the topic fails the test: the oracle
    cannot know it.
    """
    from adapters.kafka import read_topic

    placed = {(rec.partition, rec.offset) for rec in records}
    by_bytes = {(rec.key, rec.value, rec.record_ts): rec for rec in records}
    copies: list[Planned] = []
    for msg in read_topic({"bootstrap.servers": bootstrap}, topic, 120.0):
        position = (msg.partition(), msg.offset())
        if position in placed:
            continue
        original = by_bytes.get((msg.key(), msg.value(), msg.timestamp()[1]))
        assert original is not None, f"a record at {position} that no one planned"
        copies.append(replace(original, partition=position[0], offset=position[1]))
    for copy in sorted(copies, key=lambda c: (c.partition, c.offset)):
        before = [
            i
            for i, rec in enumerate(records)
            if rec.partition == copy.partition and rec.offset < copy.offset
        ]
        records.insert(before[-1] + 1 if before else 0, copy)
    if copies:
        where = [(c.partition, c.offset) for c in copies[:5]]
        print(f"the producer wrote {len(copies)} records twice, e.g. at {where}")
    return len(copies)


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``check`` until true (:func:`tests.poll.poll`); returns the seconds it took."""
    started = time.monotonic()
    poll(what, check, timeout_s, every_s=0.2)
    return time.monotonic() - started


def outcomes(client: RedisClient, namespace: str) -> int:
    """Records the boards account for so far: applied + noop + duplicate.

    The other counters (saturations, tournament refusals) count events of
    those records again, not records of their own.
    """
    stats = read_stats(client, namespace)
    return sum(stats.get(name, 0) for name in ("applied", "noop", "duplicate"))


def board_bound(records: list[Planned]) -> int:
    """How many records end on the boards' side (everything but dead letters)."""
    return sum(1 for rec in records if rec.expected in ("ok", "duplicate"))


def dead_letter_count(bootstrap: str, topic: str) -> int:
    """Committed records in a dead-letter topic (its offsets also count transaction markers)."""
    from tests.integration.streams import read_dead_letters

    return len(read_dead_letters(bootstrap, topic))


def wait_caught_up(
    job: Job,
    client: RedisClient,
    namespace: str,
    bootstrap: str,
    topic: str,
    records: list[Planned],
    timeout_s: float,
) -> float:
    """Wait until the running job accounted for every record; it must stay alive."""

    def done() -> bool:
        assert job.alive(), f"the job exited ({job.proc.returncode}):\n{job.log()[-3000:]}"
        return outcomes(client, namespace) >= board_bound(records) and dead_letter_count(
            bootstrap, f"{topic}.dlq"
        ) >= len(records) - board_bound(records)

    return wait_for(done, timeout_s, "the job catching up")


def read_letters(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """(source partition, source offset) of every dead letter in ``topic``."""
    from tests.integration.streams import read_dead_letters

    return [
        (int(h["source.partition"]), int(h["source.offset"]))
        for h in (header_map(m.headers()) for m in read_dead_letters(bootstrap, topic))
    ]


def assert_exactly_once(
    records: list[Planned],
    boards: dict[str, dict[str, int]],
    stats: dict[str, int],
    letters: list[tuple[int, int]],
    context: str = "",
) -> None:
    """Conservation (in = applied + noop + duplicate + dead) and boards equal the oracle."""
    expected, counts = oracle(records)
    assert set(boards) == set(expected), (
        f"missing {sorted(set(expected) - set(boards))[:10]} "
        f"extra {sorted(set(boards) - set(expected))[:10]} {context}"
    )
    for key in expected:
        got, want = boards[key], expected[key]
        wrong = sorted(p for p in set(got) | set(want) if got.get(p) != want.get(p))
        assert got == want, (
            f"{key} {context}: {len(wrong)} players differ, e.g. "
            f"{[(p, got.get(p), want.get(p)) for p in wrong[:5]]} (board, oracle)"
        )
    assert len(letters) == len(set(letters)), f"a dead letter was written twice {context}"
    bad = {
        (r.partition, r.offset) for r in records if r.expected not in ("ok", "duplicate", "erased")
    }
    assert set(letters) == bad, (
        f"letters missing {sorted(bad - set(letters))[:10]} "
        f"extra {sorted(set(letters) - bad)[:10]} {context}"
    )
    assert stats.get("duplicate", 0) == counts.get("duplicate", 0), context
    assert stats.get("applied", 0) + stats.get("noop", 0) == counts["accepted"], context
    for refusal in ("tournament_full", "attempts_used_up"):  # counted, never dead letters
        assert stats.get(refusal, 0) == counts.get(refusal, 0), (refusal, context)
    # Erasures are counted nowhere in the groups (docs/DESIGN.md): they end on the boards.
    conserved = (
        stats.get("applied", 0)
        + stats.get("noop", 0)
        + stats.get("duplicate", 0)
        + len(letters)
        + counts.get("erased", 0)
    )
    assert conserved == len(records), f"{conserved} outcomes for {len(records)} records {context}"


def verify(
    records: list[Planned],
    client: RedisClient,
    namespace: str,
    bootstrap: str,
    topic: str,
    context: str,
) -> None:
    """Read boards, counters and dead letters, and apply :func:`assert_exactly_once`.

    The boards' entry metadata must equal the oracle's too (none for a stream
    without v2 records).
    """
    assert_exactly_once(
        records,
        read_boards(client, namespace),
        read_stats(client, namespace),
        read_letters(bootstrap, f"{topic}.dlq"),
        context,
    )
    expected = oracle_with_metadata(records)[2]
    stored = read_metadata(client, namespace)
    assert set(stored) == set(expected), (
        f"metadata of boards missing {sorted(set(expected) - set(stored))[:10]} "
        f"extra {sorted(set(stored) - set(expected))[:10]} {context}"
    )
    for key in expected:
        assert stored[key] == expected[key], f"metadata of {key} {context}"


class Scenario:
    """The job tailing a topic while a feeder produces a stream and faults are injected.

    :meth:`run` spreads the faults over the stream (fault ``i`` of ``n`` once
    ``(i + 1) / (n + 1)`` of it was sent), checks that each landed while records
    were still arriving and that the job applied more afterwards, then waits
    for the job to account for every record, stops it cleanly and applies the
    exactly-once verdict. A fault may replace :attr:`job` (e.g. after a
    restart the test forces).
    """

    def __init__(
        self,
        private: Private,
        env: dict[str, str],
        client: RedisClient,
        namespace: str,
        topic: str,
        log_dir: Path,
        records: list[Planned],
        *,
        chunk: int = 400,
        pause_s: float = 0.2,
    ) -> None:
        self.private = private
        self.env = env
        self.client = client
        self.namespace = namespace
        self.topic = topic
        self.log_dir = log_dir
        self.records = records
        self.feeder = Feeder(
            private.bootstrap, topic, records, chunk, pause_s, started=lambda: self.outcomes() > 0
        )
        self.timings: dict[str, float] = {}
        self.job = self.start_job()

    def start_job(self, args: tuple[str, ...] = ("run",)) -> Job:
        return Job(self.env, self.log_dir / "job.log", args)

    def outcomes(self) -> int:
        return outcomes(self.client, self.namespace)

    def run(self, faults: list[Callable[[Scenario], None]], catch_up_s: float = 150.0) -> None:
        started = time.monotonic()
        self.feeder.start()
        try:
            for i, fault in enumerate(faults):
                share = len(self.records) * (i + 1) // (len(faults) + 1)
                wait_for(lambda s=share: self.feeder.sent >= s, 120, "the feeder")  # type: ignore[misc]
                wait_for(lambda: self.outcomes() > 0, 120, "the job applying records")
                at_fault = self.outcomes()
                assert at_fault < board_bound(self.records), "the fault came after the stream"
                began = time.monotonic()
                fault(self)
                self.timings[f"fault {i + 1}"] = time.monotonic() - began
                assert self.job.alive(), f"the job exited:\n{self.job.log()[-3000:]}"
                self.timings[f"resumed after fault {i + 1}"] = wait_for(
                    lambda a=at_fault: self.outcomes() > a,  # type: ignore[misc]
                    120,
                    "the job applying records after the fault",
                )
            self.feeder.finish()
            self.timings["catch-up after the last record"] = wait_caught_up(
                self.job,
                self.client,
                self.namespace,
                self.private.bootstrap,
                self.topic,
                self.records,
                catch_up_s,
            )
            code = self.job.stop()
            assert code == 0, f"exit {code}:\n{self.job.log()[-3000:]}"
        finally:
            if self.job.alive():
                self.job.kill()
        self.timings["total"] = time.monotonic() - started
        verify(self.records, self.client, self.namespace, self.private.bootstrap, self.topic, "")
        print({k: round(v, 1) for k, v in self.timings.items()})
