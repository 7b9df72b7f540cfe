"""Pure arithmetic behind the metrics: no I/O, no clock, no prometheus_client objects.

Everything here takes the time as an argument so it can be tested with a table
of cases: the consumer lag of a partition, whether a process is live and ready,
per-second rates between two scrapes, the freshness histogram filled a batch
at a time, and where a process's metrics port is.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from domain.outcomes import BOARD_OUTCOMES, REFUSALS

#: Upper bounds (seconds) of the freshness histogram: record timestamp to the
#: board write acknowledged. The target is "top-N visible within 1 s".
FRESHNESS_BUCKETS_S: tuple[float, ...] = (
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)

#: The outcomes of ``lb_records_total``: the conservation law's four places.
OUTCOMES = (*(outcome.value for outcome in BOARD_OUTCOMES), "dead_letter")

#: Reasons of ``lb_tournament_refusals_total``: counted besides the outcome above
#: (the record still updates the game's other boards), never dead letters.
TOURNAMENT_REFUSALS = tuple(refusal.value for refusal in REFUSALS)

#: ``game`` label of dead letters: a record refused before it decoded has no game.
NO_GAME = "*"


def metrics_port(base: int, process_id: int | None) -> int:
    """The port of one process: ``base + process id`` (0 stays 0: any free port)."""
    if base == 0:
        return 0
    return base + (process_id or 0)


def process_args(argv: Sequence[str]) -> tuple[int | None, str | None]:
    """(process id ``-i``, recovery directory ``-r``) of a ``bytewax.run`` command line.

    The flow factory runs inside ``python -m bytewax.run``; its own command
    line is where it learns which of ``--processes N`` it is (``lb run``
    passes ``-i``) and where its snapshots go, also when started by hand.
    """
    process: int | None = None
    recovery: str | None = None
    args = list(argv)
    for i, arg in enumerate(args[:-1]):
        value = args[i + 1]
        if arg in ("-i", "--process-id") and value.isdigit():
            process = int(value)
        elif arg in ("-r", "--recovery-directory"):
            recovery = value
    for arg in args:
        if arg.startswith("--process-id="):
            process = int(arg.split("=", 1)[1])
        elif arg.startswith("--recovery-directory="):
            recovery = arg.split("=", 1)[1]
    return process, recovery


def cluster_args(argv: Sequence[str]) -> tuple[str, ...]:
    """The addresses (``-a``) of a ``bytewax.run`` command line: its cluster's processes."""
    args = list(argv)
    for i, arg in enumerate(args):
        value = None
        if arg in ("-a", "--addresses") and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--addresses="):
            value = arg.split("=", 1)[1]
        if value is not None:
            return tuple(a.strip() for a in value.split(";") if a.strip())
    return ()


def lag_records(end_offset: int, next_offset: int) -> int | None:
    """End offset minus the next offset to read; ``None`` while the end is unknown."""
    if end_offset < 0 or next_offset < 0:
        return None
    return max(0, end_offset - next_offset)


def lag_seconds(lag: int | None, last_applied_ts_ms: int | None, now_ms: int) -> float | None:
    """Age of the last applied record while records wait; 0 once nothing waits.

    A caught-up, idle partition is not late, however old its last record:
    reporting that age would make an alert on this metric fire on every quiet
    night. ``None`` (not exported) while records wait and nothing was applied yet.
    """
    if lag is None:
        return None
    if lag == 0:
        return 0.0
    if last_applied_ts_ms is None:
        return None
    return max(0.0, (now_ms - last_applied_ts_ms) / 1000.0)


@dataclass
class WeightedBuckets:
    """A cumulative-histogram's state, filled with a whole batch per call.

    ``prometheus_client``'s Histogram takes one observation per call, with a
    lock each time; at 100K events/s that is a measurable share of the job.
    Here a batch's timestamps are sorted (nearly sorted already: one partition,
    in offset order, so timsort is linear) and each bucket's count is one
    ``bisect``: a dozen steps per batch instead of one per record. The
    collector turns the state into a histogram at scrape time.
    """

    bounds_s: tuple[float, ...] = FRESHNESS_BUCKETS_S
    counts: list[int] = field(default_factory=list)
    total_s: float = 0.0

    def __post_init__(self) -> None:
        self._bounds_ms = [b * 1000.0 for b in self.bounds_s]
        if not self.counts:
            self.counts = [0] * (len(self.bounds_s) + 1)

    def add_timestamps(self, now_ms: int, timestamps_ms: Iterable[int]) -> None:
        """Add the ages ``now_ms - ts`` of a batch of records (negative ages count as 0)."""
        stamps = sorted(timestamps_ms)
        n = len(stamps)
        if not n:
            return
        within_before = 0
        for index, bound in enumerate(self._bounds_ms):
            # age <= bound  <=>  ts >= now - bound
            within = n - bisect_left(stamps, now_ms - bound)
            self.counts[index] += within - within_before
            within_before = within
        self.counts[-1] += n - within_before
        self.total_s += max(0, now_ms * n - sum(stamps)) / 1000.0

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, cumulative count)`` pairs ending with ``+Inf``, as exposition wants them."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*map(str, self.bounds_s), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, float(running)))
        return out


@dataclass
class Health:
    """What decides liveness and readiness; times are ``time.monotonic()`` seconds."""

    started_at: float
    #: The sinks and the source are built (connected to Redis and Kafka once).
    connected: bool = False
    last_activity: float | None = None
    #: Per retried service (the setting naming its budget): when its failures began.
    failing_since: dict[str, float] = field(default_factory=dict)
    #: First and latest Kafka client error of the current run of errors.
    kafka_errors_since: float | None = None
    kafka_last_error: float | None = None
    #: Why this deployment does not write now (a standby waiting for the lease), or None.
    lease_wait: str | None = None


def kafka_failing(health: Health, now: float, quiet_s: float) -> float | None:
    """Since when Kafka errors have kept coming (no gap of ``quiet_s``), or ``None``.

    librdkafka reconnects on its own and says nothing when it succeeds; while a
    broker is down it reports an error per reconnect attempt, so a quiet spell
    is the sign it is back.
    """
    if health.kafka_last_error is None or now - health.kafka_last_error > quiet_s:
        return None
    return health.kafka_errors_since


def readiness(health: Health, now: float, threshold_s: float, quiet_s: float) -> list[str]:
    """Why the process is not ready (empty: ready).

    Ready = connected to Kafka and Redis and not in a retry loop for longer
    than ``threshold_s``: a short outage is ridden out by the retry policy and
    should not page anyone, a long one should take the process out of service.
    """
    reasons = [health.lease_wait] if health.lease_wait else []
    if not health.connected and not health.lease_wait:
        reasons.append("not connected yet")
    for setting, since in sorted(health.failing_since.items()):
        if now - since > threshold_s:
            reasons.append(f"retrying for {now - since:.0f}s ({setting})")
    erring = kafka_failing(health, now, quiet_s)
    if erring is not None and now - erring > threshold_s:
        reasons.append(f"Kafka errors for {now - erring:.0f}s")
    return reasons


def liveness(health: Health, now: float, stall_s: float) -> str | None:
    """Why the process is stuck (``None``: live).

    Every partition reaches the sinks at least every ``LB_HEAL_CHECK_S`` (an
    idle one as an empty tick), and a retry loop counts as activity of its
    own; a worker that did neither for ``stall_s`` is wedged and a supervisor
    should restart it.
    """
    last = health.last_activity if health.last_activity is not None else health.started_at
    if health.failing_since or health.lease_wait:  # retrying, or a standby waiting its turn
        return None
    if now - last > stall_s:
        return f"no batch, tick or retry for {now - last:.0f}s"
    return None


Labels = tuple[tuple[str, str], ...]
#: metric sample name -> labels -> value, as parsed from one scrape.
Samples = dict[str, dict[Labels, float]]


def parse_exposition(text: str) -> Samples:
    """Prometheus text exposition -> samples (``prometheus_client``'s own parser)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            out.setdefault(sample.name, {})[labels] = float(sample.value)
    return out


def total(samples: Samples, name: str, **match: str) -> float:
    """Sum of ``name``'s samples whose labels include ``match``."""
    found = 0.0
    for labels, value in samples.get(name, {}).items():
        have = dict(labels)
        if all(have.get(k) == v for k, v in match.items()):
            found += value
    return found


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """``name``'s samples summed per value of ``label``."""
    out: dict[str, float] = {}
    for labels, value in samples.get(name, {}).items():
        key = dict(labels).get(label, "")
        out[key] = out.get(key, 0.0) + value
    return out


@dataclass(frozen=True)
class JobView:
    """One job process as ``lb status`` and ``lb top --watch`` show it."""

    lag: dict[str, int]
    lag_seconds: float
    records: dict[str, int]
    dead_letters: dict[str, int]
    rates: dict[str, float]
    ready: bool
    live: bool
    #: Its deployment's lease role (``active``, ``standby``, ...; "" from an older job).
    lease: str = ""


def job_view(before: Samples, after: Samples, seconds: float) -> JobView:
    """Lag per ``topic/partition``, counters, and rates between two scrapes."""
    lag = {
        f"{dict(labels).get('topic')}/{dict(labels).get('partition')}": int(value)
        for labels, value in sorted(after.get("lb_consumer_lag_records", {}).items())
    }
    lag_s = max(after.get("lb_consumer_lag_seconds", {}).values(), default=0.0)
    records = {k: int(v) for k, v in by_label(after, "lb_records_total", "outcome").items()}
    letters = {k: int(v) for k, v in by_label(after, "lb_dead_letters_total", "code").items()}
    rates = rates_between(before, after, seconds)
    return JobView(
        lag=lag,
        lag_seconds=lag_s,
        records=records,
        dead_letters=letters,
        rates=rates,
        ready=total(after, "lb_ready") >= 1,
        live=total(after, "lb_live") >= 1,
        lease=next(
            (dict(labels).get("lease", "") for labels in after.get("lb_job_process", {})), ""
        ),
    )


def rates_between(before: Samples, after: Samples, seconds: float) -> dict[str, float]:
    """Records per second (all, and per outcome) between two scrapes ``seconds`` apart."""
    if seconds <= 0:
        return {}
    was = by_label(before, "lb_records_total", "outcome")
    now = by_label(after, "lb_records_total", "outcome")
    rates = {
        f"{o}_per_s": round(max(0.0, now.get(o, 0.0) - was.get(o, 0.0)) / seconds, 1)
        for o in OUTCOMES
    }
    rates["records_per_s"] = round(sum(rates.values()), 1)
    return rates


def conservation(records: Mapping[str, int]) -> int:
    """Records accounted for: every one ends applied, noop, duplicate or dead-lettered."""
    return sum(records.get(outcome, 0) for outcome in OUTCOMES)
