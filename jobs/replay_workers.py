"""Replaying a plan's partitions in several processes (``--workers N``).

Events are keyed by player, so a partition's players are written by whoever
replays that partition and by nobody else: disjoint sets of partitions can be
replayed into one staging namespace at once, each set by its own process with
its own planner, as ``lb run --processes N`` writes the live keys. Shared
group keys are written only by commutative or per-partition commands (the
counters, the window registry, the dedupe ids of the partition's own events,
the partition's own watermark field), and every write is one atomic Lua call.
Each worker replays its partitions' planned ranges to their ends (in replace
mode on to the head, as long as a fair number of records arrived meanwhile:
:func:`follow_head`), loads its fold and exits with the offsets it reached; the
parent then carries on alone from there (following the live head, cutting
over), its planner reading from Redis what the workers left.

Workers are started with the spawn method (no Kafka or Redis connection is
inherited) and ask the kernel to kill them when their parent dies
(``PR_SET_PDEATHSIG``): a ``lb backfill`` killed with SIGKILL leaves no worker
writing into the staging namespace its rerun drops and rebuilds.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import multiprocessing
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, cast

from adapters.kafka import LogReader
from adapters.redis import RedisClient
from config.clients import game_catalog, quiet_kafka_config, redis_client
from config.heap import tune_for_streaming
from config.settings import Settings
from domain.backfill_plan import (
    FOLLOW_MIN_RECORDS,
    FOLLOW_PASSES,
    BackfillPlan,
    behind,
    expiry_floor,
)
from domain.erasure import is_erasure
from domain.errors import ServiceError
from domain.keys import group_tag
from domain.planner import BoardPlanner, WritePlan
from domain.records import Accepted
from domain.signing import parse_keyring
from domain.validation import Validator
from jobs.replay import ReplayStore, apply_round
from jobs.replay_memory import MEMORY_MEMBERS, FoldingStore, LoadProgress
from schemas.decode_verify import decode_verifier
from sinks.boards import RedisBoardStore

#: Builds a worker's Redis client, log reader and validator (picklable: a
#: top-level function or a ``functools.partial`` of one).
Tools = Callable[[], tuple[RedisClient, LogReader, Validator]]

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Part:
    """One worker's share of a plan: whole partitions, ``(first, end)`` end exclusive."""

    index: int
    ranges: dict[int, tuple[int, int]]
    plan: BackfillPlan
    staging: str
    dedupe_horizon_ms: int
    cache_players: int
    #: Fill mode: windowed boards expire no earlier than this (unix seconds).
    expiry_floor_s: int | None = None
    #: Board members the replay folds in memory before it goes on through Redis
    #: (:mod:`jobs.replay_memory`); 0: every round through Redis.
    memory_members: int = MEMORY_MEMBERS


@dataclass(frozen=True)
class Replayed:
    """What a part's replay leaves: its planner, and where it stopped reading."""

    planner: BoardPlanner
    #: Partition -> the next offset to read (the planned end, or further: :func:`follow_head`).
    ends: dict[int, int]


def raise_expiries(floor_s: int, plan: WritePlan) -> None:
    """Fill mode: a rebuilt window lives at least until ``floor_s`` (an audit reads it)."""
    for write in plan.groups:
        write.expire_at_s = expiry_floor(write.expire_at_s, floor_s)


def replay_part(
    part: Part,
    client: RedisClient,
    log: LogReader,
    validator: Validator,
    progress: Callable[[int], None],
    planner: BoardPlanner | None = None,
    loading: LoadProgress | None = None,
) -> Replayed:
    """Replay ``part``'s ranges into its staging namespace (on to the head if the plan follows it).

    ``progress(records)`` after each round; ``loading(entries sent, entries to
    load)`` while the fold goes into Redis.
    """
    if planner is None:
        # A part's partitions are its own and the staging namespace was just dropped.
        planner = BoardPlanner(
            part.staging,
            part.dedupe_horizon_ms,
            part.cache_players,
            partitions=part.plan.partition_counts,
            changes=False,
            fresh=True,
            games=validator.catalog.lookup,
        )
    redis_store = RedisBoardStore(client, sort_members=True)
    # The part's players are its own and its namespace started empty: fold it in
    # memory, then load it (jobs.replay_memory); bounded, then through Redis.
    folding = (
        FoldingStore(client, redis_store, part.memory_members, planner, loading)
        if part.memory_members > 0
        else None
    )
    store: ReplayStore = redis_store if folding is None else folding
    plan = part.plan

    def keep(rec: Accepted) -> bool:
        # An erasure names no game: it reaches the wanted groups (erasure_reach).
        return is_erasure(rec) or plan.wants(group_tag(rec))

    planner.erasure_reach = lambda tag, partition, offset: plan.wants(tag)

    adjust = (
        None
        if part.expiry_floor_s is None
        else functools.partial(raise_expiries, part.expiry_floor_s)
    )

    def fold(inclusive: dict[int, tuple[int, int]]) -> None:
        for batches in log.rounds(inclusive):
            apply_round(
                batches,
                validator,
                planner,
                store,
                keep if plan.games else None,
                part.staging,
                adjust,
            )
            progress(sum(len(batch.records) for batch in batches))

    fold({p: (first, end - 1) for p, (first, end) in part.ranges.items()})
    ends = {p: end for p, (_, end) in part.ranges.items()}
    if plan.follow:
        follow_head(ends, log.ends, fold)
    if folding is not None:
        folding.finish()
    return Replayed(planner, ends)


def follow_head(
    ends: dict[int, int],
    heads: Callable[[], Mapping[int, int]],
    fold: Callable[[dict[int, tuple[int, int]]], None],
) -> None:
    """Fold what was written past ``ends`` since the plan was made; ``ends`` moves along.

    A replace-mode replay ends at the live head. Records written while a
    process folded its planned ranges are folded here too, in memory and at
    the fold's pace, before the load, rather than by the parent's catch-up,
    which reads every player from Redis (its planner never saw them) at a
    fraction of that pace and, at 10M players, would start several minutes
    of records behind. A few passes, until fewer than
    :data:`~domain.backfill_plan.FOLLOW_MIN_RECORDS` are behind.
    """
    for _ in range(FOLLOW_PASSES):
        todo = behind(ends, heads())
        if sum(last - first + 1 for first, last in todo.values()) < FOLLOW_MIN_RECORDS:
            return
        fold(todo)
        ends.update((p, last + 1) for p, (_, last) in todo.items())


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies; exit if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _worker(
    part: Part, tools: Tools, counts: Any, loads: Any, conn: Connection, parent: int
) -> None:
    """A worker process: replay, then report ``("ok", (records, ends))`` or ``("error", line)``.

    ``counts[index]`` holds its records so far; ``loads[2 index]`` and
    ``loads[2 index + 1]`` the entries its load sent and has to send.
    """
    _die_with_parent(parent)
    # Ctrl-C (or a SIGTERM to the process group) reaches every worker too: the
    # parent alone decides, stops the workers (SIGKILL) and drops the staging keys.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    done = 0

    def progress(records: int) -> None:
        nonlocal done
        done += records
        counts[part.index] = done

    def loading(sent: int, total: int) -> None:
        loads[2 * part.index], loads[2 * part.index + 1] = sent, total

    try:
        client, log, validator = tools()
        tune_for_streaming()
        replayed = replay_part(part, client, log, validator, progress, loading=loading)
        conn.send(("ok", (done, replayed.ends)))
    except Exception as exc:  # reported by the parent as one line
        conn.send(("error", str(exc) or type(exc).__name__))
    finally:
        conn.close()


def run_parts(
    parts: list[Part],
    tools: Tools,
    progress: Callable[[int], None],
    loading: LoadProgress | None = None,
) -> tuple[int, dict[int, int]]:
    """Replay every part in its own process; ``progress(records so far)`` about once a second.

    ``loading(entries sent, entries to load)`` follows, summed over the parts
    whose fold has started its load.

    Returns the records replayed and, per partition, the next offset to read
    (:attr:`Replayed.ends`). A failed worker stops the others and raises
    :class:`ServiceError` naming it; so does any exception here (Ctrl-C), after
    every worker is gone, so the caller may drop the staging namespace safely.
    """
    context = multiprocessing.get_context("spawn")
    counts = context.Array("q", len(parts), lock=False)
    loads = context.Array("q", 2 * len(parts), lock=False)
    procs: list[Any] = []
    conns: dict[Connection, Part] = {}
    try:
        for part in parts:
            mine, theirs = context.Pipe(duplex=False)
            proc = context.Process(
                target=_worker,
                args=(part, tools, counts, loads, theirs, os.getpid()),
                name=f"lb-replay-{part.index}",
                daemon=True,
            )
            proc.start()
            theirs.close()
            procs.append(proc)
            conns[mine] = part
        total = 0
        ends: dict[int, int] = {}
        while conns:
            for ready in wait(list(conns), timeout=1.0):
                conn = cast(Connection, ready)
                part = conns.pop(conn)
                try:
                    status, value = conn.recv()
                except EOFError:
                    status, value = "error", "exited without a report"
                if status != "ok":
                    raise ServiceError(
                        f"replay worker {part.index} (partitions {sorted(part.ranges)}): {value}"
                    )
                records, reached = value
                total += int(records)
                ends.update(reached)
            progress(sum(counts))
            if loading is not None and any(loads[1::2]):
                loading(sum(loads[0::2]), sum(loads[1::2]))
        return total, ends
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join()


def replay_tools(
    settings: Settings, topic: str, client: RedisClient | None = None
) -> tuple[RedisClient, LogReader, Validator]:
    """A replayer's Redis client, log reader and validator.

    Top-level, so that ``functools.partial(replay_tools, settings, topic)``
    can be sent to a replay process (:func:`run_parts`), which
    builds its own connections.
    """
    validator = Validator(
        game_catalog(settings),
        decode_verifier(parse_keyring(settings.hmac_keys.reveal()), engine=settings.decoder),
    )
    log = LogReader(quiet_kafka_config(settings), topic)
    return client if client is not None else redis_client(settings), log, validator
