"""Shared plumbing of the benchmarks: services, throwaway resources, the job, the report.

Nothing here measures anything by itself. Every resource a benchmark makes
(topics, Redis keys under its own namespace, a temporary state directory, the
job's process group) is made through :class:`Scratch`, which removes all of it
on exit, also after an error or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from adapters.redis import RedisClient, text_of
from config.clients import redis_client
from config.settings import Settings, child_environment, profiles_topic_for
from producer.score_producer import ensure_topic

ROOT = Path(__file__).resolve().parent.parent
#: Where sections go unless ``LB_BENCH_DOC`` names another file (see :func:`bench_doc`).
PUBLISHED_DOC = ROOT / "docs" / "BENCHMARKS.md"
GAME = "g1"
#: The exactly-once counters whose sum is "records that reached the boards".
COUNTED = ("applied", "noop", "duplicate")
_STARTED = time.monotonic()


def log(message: str) -> None:
    """A progress line on stderr, stamped with seconds since the script started."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def base_settings() -> Settings:
    """Settings of the running services (``lb up``'s ports), whatever the cwd."""
    env = child_environment({})
    env.setdefault("LB_STATE_DIR", str(ROOT / ".lb"))
    return Settings.from_env(env)


def bench_doc(settings: Settings) -> Path:
    """The file sections go to: ``LB_BENCH_DOC``, or the checkout's ``docs/BENCHMARKS.md``.

    ``python -m bench --quick`` points its benchmarks at a scratch copy this way.
    """
    return PUBLISHED_DOC if settings.bench_doc is None else settings.bench_doc


def run_id() -> str:
    """A short id that makes this run's topic and namespace names unique."""
    return uuid.uuid4().hex[:10]


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


# -- throwaway resources ---------------------------------------------------------


@dataclass
class Scratch:
    """Topics, Redis namespaces and a state directory owned by one benchmark run."""

    settings: Settings
    prefix: str
    topics: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    state_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.state_dir = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        self.redis = redis_client(self.settings)

    def topic(self, name: str, partitions: int) -> str:
        """Create ``name`` (records kept forever, like ``lb produce``) and own it.

        Also owns the profiles topics a job on ``name`` creates beside it
        (``<name>.profiles`` and its dead letters), so they go with the run too.
        """
        profiles = profiles_topic_for(name)
        self.topics += [name, profiles, f"{profiles}.dlq"]
        ensure_topic(
            self.settings.kafka_bootstrap,
            name,
            partitions,
            self.settings.kafka_extra,
            {"retention.ms": "-1"},
        )
        return name

    def own_topic(self, name: str) -> str:
        """Own a topic someone else creates (the job's dead-letter topic)."""
        self.topics.append(name)
        return name

    def namespace(self, name: str) -> str:
        """Own the Redis keys ``<name>:*``."""
        self.namespaces.append(name)
        return name

    def drop_namespace(self, name: str) -> int:
        """Delete every key of ``name`` now (frees Redis memory between runs)."""
        deleted = 0
        batch: list[bytes] = []
        for key in self.redis.scan_iter(match=f"{name}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += int(self.redis.unlink(*batch))
                batch = []
        if batch:
            deleted += int(self.redis.unlink(*batch))
        return deleted

    def drop_topics(self, names: Sequence[str]) -> None:
        """Delete ``names`` (missing ones are fine)."""
        if not names:
            return
        admin = AdminClient({**self.settings.kafka_config(), "log_level": 3})
        futures = admin.delete_topics(list(names), operation_timeout=30, request_timeout=30)
        for name, future in futures.items():
            try:
                future.result(timeout=60)
            except KafkaException as exc:
                if "UNKNOWN_TOPIC" not in str(exc):
                    log(f"could not delete topic {name}: {exc}")

    def __enter__(self) -> Scratch:
        # A SIGTERM (a timeout, a stopped parent run) must still delete the run's
        # topics, keys and jobs: make it unwind through __exit__.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for job in self.jobs:
            job.kill()
        for name in self.namespaces:
            try:
                self.drop_namespace(name)
            except Exception as error:  # cleanup must go on
                log(f"could not delete namespace {name}: {error}")
        try:
            self.drop_topics(self.topics)
        except Exception as error:
            log(f"could not delete topics {self.topics}: {error}")
        shutil.rmtree(self.state_dir, ignore_errors=True)
        log(f"cleaned up: topics {self.topics}, namespaces {self.namespaces}")


# -- the job -------------------------------------------------------------------------


def job_env(
    settings: Settings, topic: str, dlq: str, namespace: str, state_dir: Path
) -> dict[str, str]:
    """The environment of one ``lb run``: our services, our topic, our namespace."""
    return child_environment(
        {
            "LB_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "LB_REDIS_URL": settings.redis_url.reveal(),
            "LB_TOPIC": topic,
            "LB_DLQ_TOPIC": dlq,
            "LB_NAMESPACE": namespace,
            "LB_STATE_DIR": str(state_dir),
        }
    )


class Job:
    """``python -m lb.cli run ...`` (or another command) in its own process group, logged."""

    def __init__(
        self, args: Sequence[str], env: Mapping[str, str], log_path: Path, command: str = "run"
    ) -> None:
        self.argv = [sys.executable, "-m", "lb.cli", command, *args]
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=dict(env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def command(self) -> str:
        return " ".join(["python", *self.argv[1:]])

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (``lb run`` forwards it to Bytewax), then SIGKILL after ``timeout_s``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log(f"job did not stop within {timeout_s:g} s: killing its process group")
            self.kill()
            return self.proc.wait()

    def wait(self, timeout_s: float | None = None) -> int:
        code = self.proc.wait(timeout_s)
        self._log.close()
        return code

    def kill(self) -> None:
        """SIGKILL the job's own process group (only what this object started)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if not self._log.closed:
            self._log.close()

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def stats_key(namespace: str, game: str = GAME) -> str:
    """The game's exactly-once counters hash."""
    return f"{namespace}:{{{game}}}:meta:stats"


def counted(client: RedisClient, namespace: str, game: str = GAME) -> tuple[int, dict[str, int]]:
    """(applied + noop + duplicate, every counter) of one game's ``meta:stats``."""
    raw = client.hgetall(stats_key(namespace, game))
    stats = {text_of(k): int(v) for k, v in raw.items()}
    return sum(stats.get(name, 0) for name in COUNTED), stats


# -- CPU accounting -----------------------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """User + system CPU seconds of every child waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def self_cpu_s() -> float:
    """User + system CPU seconds of this process (all its threads, librdkafka's too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _stat_fields(pid: str) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _session_stats(session: int) -> Iterator[list[str]]:
    """``/proc/<pid>/stat`` fields (after the name) of each live process of ``session``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry.name)
        if fields is not None and int(fields[3]) == session:
            yield fields


def session_cpu_s(session: int) -> float:
    """CPU seconds of the live processes of one session (a job's process group)."""
    return sum(int(f[11]) + int(f[12]) for f in _session_stats(session)) / _TICK


def session_rss_bytes(session: int) -> int:
    """Resident memory of the live processes of one session (a job's process group)."""
    return sum(int(f[21]) for f in _session_stats(session)) * _PAGE


def system_cpu_s() -> dict[str, float | None]:
    """Busy CPU seconds of the whole machine (every process, ours and others')."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return {"machine": None}
    ticks = [int(x) for x in first[1:9]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return {"machine": busy / _TICK}


def steal_ticks() -> tuple[int, int]:
    """(stolen, all) CPU ticks of the machine so far: the hypervisor's share, for context.

    On a virtual machine the host may run another guest on a CPU this one
    thinks it has; a stolen tick is time every process here waited, Redis
    included, whatever its priority.
    """
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0, 0
    return ticks[7], sum(ticks)


def steal_share(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The stolen share (%) of every CPU tick between two :func:`steal_ticks`."""
    ticks = after[1] - before[1]
    return round(100 * (after[0] - before[0]) / ticks, 1) if ticks > 0 else None


def service_cpu_s(settings: Settings, client: RedisClient) -> dict[str, float | None]:
    """Cumulative CPU seconds of Redis, the Kafka broker and the whole machine (context)."""
    out: dict[str, float | None] = {"redis": None, "kafka": None, **system_cpu_s()}
    try:
        info = client.info("cpu")
        out["redis"] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    except Exception:
        pass
    try:
        services = json.loads((settings.state_dir / "services.json").read_text())
        fields = _stat_fields(str(int(services["kafka_pid"])))
        if fields is not None:
            out["kafka"] = (int(fields[11]) + int(fields[12])) / _TICK
    except Exception:
        pass
    return out


def redis_background(client: RedisClient) -> dict[str, float]:
    """Redis' forks so far (AOF rewrites, snapshots) and its children's CPU seconds.

    A rewrite's child copies the whole dataset with a core of its own, and the
    fork itself stops the main thread: on a small machine both compete with
    the job, so the benchmarks that load millions of members report them.
    """
    stats, cpu = client.info("stats"), client.info("cpu")
    persistence = client.info("persistence")
    return {
        "forks": float(stats.get("total_forks", 0)),
        "aof_rewrites": float(persistence.get("aof_rewrites", 0)),
        "children_cpu_s": float(cpu.get("used_cpu_user_children", 0))
        + float(cpu.get("used_cpu_sys_children", 0)),
        "latest_fork_ms": float(stats.get("latest_fork_usec", 0)) / 1000,
    }


def background_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Forks, AOF rewrites and children's CPU between two :func:`redis_background` readings."""
    out = {
        name: round(after[name] - before[name], 2)
        for name in ("forks", "aof_rewrites", "children_cpu_s")
    }
    out["latest_fork_ms"] = round(after["latest_fork_ms"], 1)
    return out


def redis_time(client: RedisClient) -> tuple[float, dict[str, float]]:
    """Redis' main-thread CPU seconds and the seconds spent in each command so far."""
    cpu = client.info("cpu")
    main = float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])
    commands = {
        name.removeprefix("cmdstat_"): float(stats.get("usec", 0)) / 1e6
        for name, stats in client.info("commandstats").items()
    }
    return main, commands


def redis_spent(
    before: tuple[float, dict[str, float]], after: tuple[float, dict[str, float]]
) -> dict[str, Any]:
    """Redis' CPU between two readings: main thread, and the commands that took most."""
    spent = {
        name: round(seconds - before[1].get(name, 0.0), 2) for name, seconds in after[1].items()
    }
    top = sorted(((s, n) for n, s in spent.items() if s >= 0.01), reverse=True)[:6]
    return {
        "main_thread_s": round(after[0] - before[0], 2),
        "commands_s": {name: seconds for seconds, name in top},
    }


def cpu_delta(
    before: Mapping[str, float | None], after: Mapping[str, float | None], seconds: float
) -> dict[str, float | None]:
    """Average cores used per component over ``seconds``."""
    out: dict[str, float | None] = {}
    for name, start in before.items():
        end = after.get(name)
        out[name] = (
            None
            if start is None or end is None or seconds <= 0
            else round((end - start) / seconds, 2)
        )
    return out


class CpuWindow:
    """Average cores used by this script, Redis, Kafka, the machine and everyone else."""

    def __init__(self, settings: Settings, client: RedisClient) -> None:
        self._settings = settings
        self._client = client
        self._start = self._sample()
        self._t0 = time.monotonic()

    def _sample(self) -> dict[str, float | None]:
        return {**service_cpu_s(self._settings, self._client), "bench": self_cpu_s()}

    def cores(self) -> dict[str, float | None]:
        """Cores busy since construction; ``other`` = machine - bench - Redis - Kafka."""
        out = cpu_delta(self._start, self._sample(), time.monotonic() - self._t0)
        if out.get("machine") is not None:
            known = sum(v or 0.0 for k, v in out.items() if k != "machine")
            out["other"] = round(max(0.0, (out["machine"] or 0.0) - known), 2)
        return out


# -- statistics and the report ------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _git(*args: str) -> str | None:
    """A git command's output in the repository, or None without git."""
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def machine() -> dict[str, Any]:
    """Where the figures come from: cores, CPU model, load, versions, commit, date."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = _git("rev-parse", "--short", "HEAD") or ""
    # The files a benchmark run writes itself do not count as changes.
    written = [f":!docs/{name}" for name in ("BENCHMARKS.md", "benchmarks.json", "benchmarks.png")]
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".", *written)
    try:
        from importlib.metadata import version

        bytewax_version = version("bytewax")
    except Exception:
        bytewax_version = "?"
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "bytewax": bytewax_version,
        "commit": commit,
        "uncommitted": changed != "",  # unknown (None) counts as changed
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def machine_line(info: Mapping[str, Any]) -> str:
    """:func:`machine` as one Markdown line."""
    return (
        f"{info['date']}; {info['nproc']} cores ({info['cpu_model']}), load average at start "
        f"{', '.join(str(x) for x in info['loadavg_at_start'])}; Python {info['python']}, "
        f"Bytewax {info['bytewax']}; commit `{info['commit'] or '?'}`"
        # Older summaries did not record it: say so rather than claim a clean tree.
        + (" (plus uncommitted work)" if info.get("uncommitted", True) else "")
    )


_DOC_HEADER = """# Benchmarks

Figures measured by the scripts in [`bench/`](../bench/) against the real local
services (`lb up`: one Kafka KRaft broker, one Redis). Each script rewrites only its
own section below. The machine is small (2 cores) and shared with other work, so
**compare ratios measured in the same run**; the absolute numbers are context.
"""


def write_section(section: str, body: str, doc: Path | None = None) -> None:
    """Replace (or append) the ``section`` block of ``doc`` (default: :func:`bench_doc`)."""
    doc = bench_doc(base_settings()) if doc is None else doc
    begin = f"<!-- BEGIN {section} -->"
    end = f"<!-- END {section} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    text = doc.read_text() if doc.exists() else _DOC_HEADER
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block
    doc.parent.mkdir(parents=True, exist_ok=True)
    temp = doc.with_suffix(".md.tmp")
    temp.write_text(text)
    temp.replace(doc)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def emit(summary: Mapping[str, Any], stream: TextIO | None = None) -> None:
    """The final JSON on stdout (looked up at the call, so a redirected stdout gets it)."""
    out = stream if stream is not None else sys.stdout
    out.write(json.dumps(summary, indent=2) + "\n")
    out.flush()


def publish(
    section: str,
    summary: dict[str, Any],
    markdown: Callable[[dict[str, Any]], str],
    verified: bool,
    write_doc: bool,
) -> int:
    """Write the doc section (verified runs only) and the JSON; the exit code."""
    summary["verified"] = verified
    if verified and write_doc:
        write_section(section, markdown(summary))
        log("wrote docs/BENCHMARKS.md")
    emit(summary)
    return 0 if verified else 1
