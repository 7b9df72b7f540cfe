"""The board store: batched reads and atomic group writes against Redis, no decisions.

Commands leave in one round trip per round of batches: the previous round's
write answers and this round's reads come back together, and this round's
writes leave without waiting (on a standalone Redis, packed by hiredis on one
connection, :mod:`sinks.wire`; on a cluster, one pipeline per master).

Outages: a dropped connection, a timeout (``LB_REDIS_TIMEOUT_S``), Redis
loading its AOF after a restart, or a cluster failing over makes the store wait
and re-send the same round trip with backoff for up to ``LB_REDIS_RETRY_S``,
then fail loudly (:class:`~domain.errors.RetryBudgetExceeded`). Re-sending a
write that Redis had in fact applied before the connection dropped is a
no-op thanks to the watermark guard, so waiting never doubles an effect;
while it waits the worker reads nothing more (backpressure, not loss).

Live pushes: the same Lua call appends what it changed (window, player, old
and new score) as one entry to the group's capped change stream
(``domain.keys.GroupKeys.changes``), so a subscriber sees exactly the writes
that happened, in order, and never one that was rolled back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError

from adapters.redis import RedisClient, Script, as_cluster, node_of, text
from domain.backoff import Backoff
from domain.errors import Deposed, RetryBudgetExceeded, ServiceError, StopRequested
from domain.planner import GroupWrite, LookupResults, Lookups, WritePlan
from sinks.boards.dense_union import (
    DENSE_LIB,
    TRIM_OUTBOX,
    Queued,
    apply_all,
    last_offset,
    union_call,
)
from sinks.boards.dense_union import queued as queued_changes
from sinks.boards.encoding import FENCED, PER_COMMAND, encode, outcomes, raise_first_error
from sinks.boards.reads import parse_reads, read_commands
from sinks.retry import abandon, call_with_retry, give_up
from sinks.wire import RawPipeline
from telemetry import hooks

log = logging.getLogger(__name__)

#: Errors after which re-sending the same round trip is safe and may succeed: the
#: connection dropped or timed out (BusyLoadingError, Redis loading its AOF, is a
#: ConnectionError), or a cluster is failing over (slots moving, a master down,
#: a demoted master refusing writes, the slot map unreachable).
TRANSIENT: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.AskError,
    redis.exceptions.RedisClusterException,
)

#: Connection errors no wait can fix: wrong credentials, a user without the rights.
PERMANENT: tuple[type[BaseException], ...] = (
    redis.AuthenticationError,
    redis.exceptions.AuthorizationError,
)

#: Fail on the first error (tools and benchmarks that would rather stop than wait).
NO_RETRY = Backoff(budget_s=0)

#: The group write (``apply_group.lua``; arguments: :func:`sinks.boards.encoding.encode`).
APPLY_GROUP = Script(
    DENSE_LIB
    + (Path(__file__).parent.parent / "teams" / "team_lib.lua").read_text()
    + (Path(__file__).with_name("apply_group.lua")).read_text()
)


class RedisBoardStore:
    """Batched reads and atomic per-group writes; no decisions of its own.

    Every round trip is retried under ``retry`` (see the module docstring);
    other Redis errors (a script error, out of memory) fail at once.
    """

    def __init__(
        self,
        client: RedisClient,
        retry: Backoff = NO_RETRY,
        stopping: Callable[[], bool] = lambda: False,
        *,
        sort_members: bool = False,
        fence: Callable[[], int] | None = None,
        writes_in_flight: int = 0,
    ) -> None:
        """``sort_members``: send each board's members in score order (replays; see ``_encode``).

        ``fence`` gives the lease epoch of each write (``flows.lease``); without
        one, writes carry epoch 0 and are not fenced (tools beside the job).
        """
        self._client = client
        self._fence = fence
        self._retry = retry
        self._sort = sort_members
        self._stopping = stopping
        self._cluster = isinstance(client, RedisCluster)
        self._pace = writes_in_flight
        # Standalone: commands packed by hiredis on one connection (sinks.wire);
        # a cluster goes through redis-py's cluster client, which routes them.
        self._wire = (
            None if isinstance(client, RedisCluster) else RawPipeline(client, writes_in_flight)
        )
        #: Encoded group writes sent without waiting (see send_writes).
        self._inflight: list[tuple[list[str], list[Any]]] | None = None
        self._inflight_sent = False
        #: When the writes in flight failed to leave (``time.monotonic``), else None.
        self._send_failed: float | None = None
        self._stale_slots = False
        #: Shard outbox fields whose queued changes the writes sent must follow
        #: although they wrote nothing there (``WritePlan.dense_catch_up``).
        self._catch_up: list[tuple[str, str]] = []

    def _round_trip(self, what: str, call: Any, failed_since: float | None = None) -> Any:
        try:
            return call_with_retry(
                call,
                what=what,
                policy=self._retry,
                transient=TRANSIENT,
                permanent=PERMANENT,
                setting="LB_REDIS_RETRY_S",
                after_failure=self._forget_slots,
                stopping=self._stopping,
                failed_since=failed_since,
            )
        except StopRequested as exc:
            abandon(exc)
        except redis.ResponseError as exc:
            fenced = FENCED.search(str(exc))
            if fenced:
                raise Deposed(
                    f"deposed: Redis refused a write of an older lease epoch "
                    f"({fenced.group(0)}): another deployment writes this projection now"
                ) from exc
            raise ServiceError(f"{what} failed: {exc}") from exc
        except redis.RedisError as exc:
            raise ServiceError(f"{what} failed: {exc}") from exc

    def _epoch(self) -> int:
        return 0 if self._fence is None else self._fence()

    def _forget_slots(self) -> None:
        """After a failure a cluster's slot map may be stale: refresh it before the next try."""
        self._stale_slots = self._cluster

    def _refresh_slots(self) -> None:
        if self._stale_slots:
            as_cluster(self._client).nodes_manager.initialize()
            self._stale_slots = False

    def read(self, lookups: Lookups) -> LookupResults:
        """Answer every lookup in one pipelined round trip."""
        return self.read_many([lookups])[0]

    def read_watermarks(self, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        """The stored watermark of each ``(meta:wm key, field)``, in one round trip."""
        _, stored = self.read_many_and_audit([], audit=pairs)
        return stored

    def read_progress(self, key: str) -> dict[str, int]:
        """A partition's progress hash (see :mod:`domain.healing`); empty when missing."""

        def attempt() -> dict[Any, Any]:
            self._refresh_slots()
            return dict(self._client.hgetall(key))

        raw = self._round_trip("Redis read", attempt)
        return {(text(name)): int(value) for name, value in raw.items()}

    def write_progress(self, progress: Sequence[tuple[str, dict[str, int]]]) -> None:
        """Write progress hashes now (on close; otherwise they ride on the next read)."""
        if progress:
            self.read_many_and_audit([], progress=progress)

    def read_many(self, many: Sequence[Lookups]) -> list[LookupResults]:
        """Answer the lookups of several batches in one pipelined round trip."""
        return self.read_many_and_audit(many)[0]

    def read_many_and_audit(
        self,
        many: Sequence[Lookups],
        progress: Sequence[tuple[str, dict[str, int]]] = (),
        audit: Sequence[tuple[str, str]] = (),
    ) -> tuple[list[LookupResults], list[int | None]]:
        """One round trip: write ``progress`` hashes, answer ``many``, read ``audit`` watermarks.

        Only with no writes in flight (:meth:`drain` them first): their answers
        would be lost here. The board sink itself uses :meth:`exchange`.
        """
        if self._inflight is not None:
            raise RuntimeError("writes are in flight: exchange() or drain() them first")
        results, stored, _ = self.exchange(many, progress, audit)
        return results, stored

    def send_writes(self, plans: Sequence[WritePlan]) -> list[int] | None:
        """Start writing the groups of ``plans``; None when the answers come later.

        On a standalone Redis the writes leave now and the answers come with the
        next :meth:`exchange` (or :meth:`drain`): the worker validates and plans
        its next batch while Redis applies them, and one connection keeps them
        ahead of the next round's reads, so those reads see them. A send that
        fails is sent again by that exchange. A cluster writes at once and the
        answers are returned (as from :meth:`apply_many`).
        """
        if self._wire is None:
            return self.apply_many(plans)
        if self._inflight is not None:
            raise RuntimeError("writes are already in flight: exchange() or drain() them first")
        groups = [write for plan in plans for write in plan.groups]
        self._catch_up = _catch_up(plans)
        if not groups:
            self._follow({})
            return []
        epoch = self._epoch()
        self._inflight = [self._encode(write, epoch) for write in groups]
        self._inflight_sent = False
        try:
            self._wire.send(self._wire.evals(APPLY_GROUP, self._inflight))
            self._inflight_sent = True
        except TRANSIENT as exc:
            # The next round trip sends them again, as a retry of this failure:
            # the outage is logged, counted and seen by readiness from now on.
            self._send_failed = time.monotonic()
            hooks.retrying("LB_REDIS_RETRY_S", self._send_failed)
            log.warning("Redis write not sent (%s); sending it with the next round trip", exc)
        return None

    def drain(self) -> list[int] | None:
        """The answers of the writes in flight (None when there are none)."""
        if self._inflight is None:
            return None
        return self.exchange([])[2]

    def exchange(
        self,
        many: Sequence[Lookups],
        progress: Sequence[tuple[str, dict[str, int]]] = (),
        audit: Sequence[tuple[str, str]] = (),
    ) -> tuple[list[LookupResults], list[int | None], list[int] | None]:
        """One round trip: settle the writes in flight, then as :meth:`read_many_and_audit`.

        Returns the lookups' results, the audited watermarks and the answers of
        the writes that were in flight (None when there were none). Redis runs
        the writes first, so the reads see them; the progress hashes describe
        writes acknowledged in earlier rounds, so sending them ahead of this
        round's reads keeps them behind the writes they describe.
        """
        inflight = self._inflight
        wire = self._wire
        queued = read_commands(many, progress, audit, batched=wire is not None)
        written: list[int] | None = None

        def attempt() -> list[Any]:
            nonlocal written
            if wire is None:
                self._refresh_slots()
                pipe = self._client.pipeline(transaction=False)
                for command in queued:
                    pipe.execute_command(*command)
                return list(pipe.execute()) if len(pipe) else []
            if inflight is None:
                return raise_first_error(wire.run(queued))
            if not self._inflight_sent:  # a failed send or attempt: send the writes again
                wire.send(wire.evals(APPLY_GROUP, inflight))
            self._inflight_sent = False  # until this attempt has every answer
            replies = wire.run(queued)
            answers, reads = replies[: len(inflight)], replies[len(inflight) :]
            if any(isinstance(reply, NoScriptError) for reply in answers):
                # Redis restarted or flushed its scripts: load it, send everything again.
                wire.forget(APPLY_GROUP)
                wire.send(wire.evals(APPLY_GROUP, inflight))
                replies = wire.run(queued)
                answers, reads = replies[: len(inflight)], replies[len(inflight) :]
            written = outcomes(answers)
            pending.update(queued_changes(answers))
            return raise_first_error(reads)

        pending: Queued = {}
        answers = self._round_trip("Redis read", attempt, self._send_failed)
        self._send_failed = None
        self._inflight = None
        self._follow(pending)
        out, stored = parse_reads(many, len(progress), answers)
        return out, stored, written

    def apply(self, plan: WritePlan) -> list[int]:
        """Write every group of ``plan``; returns 1 per applied group, 0 per skipped replay."""
        return self.apply_many([plan])

    def apply_many(self, plans: Sequence[WritePlan]) -> list[int]:
        """Write the groups of several plans in one round trip (one per master).

        A retried round trip may answer 0 for a group the lost attempt had
        already applied: the effect is there once, either way.
        """
        groups = [write for plan in plans for write in plan.groups]
        if self._inflight is not None:
            raise RuntimeError("writes are in flight: exchange() or drain() them first")
        self._catch_up = _catch_up(plans)
        if not groups:
            self._follow({})
            return []
        epoch = self._epoch()
        encoded = [self._encode(write, epoch) for write in groups]
        pending: Queued = {}

        def attempt() -> list[int]:
            replies = self._run(APPLY_GROUP, encoded)
            pending.update(queued_changes(replies))
            return outcomes(replies)

        written = list(self._round_trip("Redis write", attempt))
        self._follow(pending)
        return written

    def _encode(self, write: GroupWrite, epoch: int) -> tuple[list[str], list[Any]]:
        return encode(write, self._sort, epoch)

    def _run(self, script: Script, calls: Sequence[tuple[list[str], list[Any]]]) -> list[Any]:
        """Every call of ``script``: one pipeline per master, or one round trip standalone."""
        if self._cluster:
            return self._run_cluster(script, calls)
        wire = self._wire
        assert wire is not None
        return wire.eval_many(script, calls)

    def _follow(self, pending: Queued) -> None:
        """Apply shards' queued count changes to their games' counts (sharded dense games).

        Runs before the writes' batches are acknowledged, so a crash before it
        is repaired when the batch is read again (``sinks.boards.dense_union``).
        """
        catch_up, self._catch_up = [c for c in self._catch_up if c not in pending], []
        if catch_up:
            read = self._round_trip("Redis read (dense outbox)", lambda: self._hgets(catch_up))
            pending = {**pending, **dict(zip(catch_up, read, strict=True))}
        work = [(where, entries) for where, entries in pending.items() if entries]
        if not work:
            return
        calls = [union_call(*where, entries, PER_COMMAND) for where, entries in work]
        applied = self._round_trip(
            "Redis write (dense counts)", lambda: apply_all(calls, self._run)
        )
        trims: list[tuple[list[str], list[Any]]] = []
        for ((outbox, field), entries), offset in zip(work, applied, strict=True):
            if offset is None:
                log.error(
                    "the game-wide distinct-score counts of %s do not follow its shard's "
                    "writes (Redis lost writes): dense reads of the game are refused "
                    "until lb rebuild",
                    outbox,
                )
                # The recount starts from the shards: the changes are not needed.
                offset = last_offset(entries)
            trims.append(([outbox], [field, offset]))
        if trims:
            self._round_trip("Redis write (dense outbox)", lambda: self._run(TRIM_OUTBOX, trims))

    def _hgets(self, fields: Sequence[tuple[str, str]]) -> list[str]:
        """``HGET key field`` of each pair, in one round trip (one per master)."""
        if self._wire is None:
            self._refresh_slots()
            pipe = self._client.pipeline(transaction=False)
            for key, name in fields:
                pipe.hget(key, name)
            replies = list(pipe.execute())
        else:
            replies = raise_first_error(self._wire.run([("HGET", k, n) for k, n in fields]))
        return ["" if reply is None else text(reply) for reply in replies]

    def _run_cluster(
        self, script: Script, encoded: Sequence[tuple[list[str], list[Any]]]
    ) -> list[Any]:
        """One pipeline per master; a call's keys share a slot, so its master runs it.

        redis-py's cluster pipeline refuses scripts, so groups are routed here.
        Re-sending a group after a topology change (MOVED, failover) is safe:
        the script's watermark guard makes a second application a no-op.
        """
        self._refresh_slots()
        by_node: dict[str, tuple[Any, list[tuple[int, list[str], list[Any]]]]] = {}
        cluster = as_cluster(self._client)
        for at, (keys, args) in enumerate(encoded):
            name, conn = node_of(cluster, keys[0])
            entry = by_node.get(name)
            if entry is None:
                entry = by_node[name] = (conn, [])
            entry[1].append((at, keys, args))
        out: list[Any] = [None] * len(encoded)
        step = self._pace or max(1, len(encoded))
        for conn, calls in by_node.values():
            registered = script.registered(conn)
            for first in range(0, len(calls), step):  # paced: a round trip per step
                chunk = calls[first : first + step]
                pipe = conn.pipeline(transaction=False)
                for _, keys, args in chunk:
                    registered(keys=keys, args=args, client=pipe)
                replies = pipe.execute(raise_on_error=False)
                for (at, _, _), reply in zip(chunk, replies, strict=True):
                    out[at] = reply
        return out


def _catch_up(plans: Sequence[WritePlan]) -> list[tuple[str, str]]:
    return [where for plan in plans for where in plan.dense_catch_up]


def connect(
    client_factory: Callable[[], Any],
    retry: Backoff,
    stopping: Callable[[], bool] = lambda: False,
) -> Any:
    """A pinged client, waiting under the retry budget while Redis is not up yet.

    A stop request while it waits ends the process at once (:func:`sinks.retry.abandon`).
    """

    def attempt() -> Any:
        client = client_factory()  # a cluster client connects here already
        client.ping()
        return client

    try:
        return call_with_retry(
            attempt,
            what="Redis connect",
            policy=retry,
            transient=TRANSIENT,
            permanent=PERMANENT,
            setting="LB_REDIS_RETRY_S",
            stopping=stopping,
        )
    except StopRequested as exc:
        abandon(exc)
    except RetryBudgetExceeded as exc:
        give_up(exc)
    except redis.RedisError as exc:
        raise ServiceError(f"cannot reach Redis: {exc}") from exc
