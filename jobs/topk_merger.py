"""Rebuild the global top-K key of every sharded board, atomically, every pass.

One pass (:meth:`TopKMerger.run_once`) costs, whatever the number of games:

1. one pipelined round trip (one per node on a cluster) reading every shard's
   ``meta:boards`` registry of every sharded game: which windows exist;
2. one pipelined round trip reading ``ZREVRANGE <shard board> 0 K WITHSCORES``
   of every (game, window, shard);
3. the k-way merge of each board's shard tops (:func:`domain.topk.merge_shard_tops`,
   exact: see :mod:`domain.topk`);
4. one pipelined round trip writing the global keys: per board one Lua call
   that deletes the key and adds the new content (``ZADD``) in the same atomic step
   (a reader sees the previous top-K or the new one, never a missing or partial
   key), then sets its expiry. A board whose merged content did not change
   since this process last wrote it is not rewritten; only its expiry is
   extended (and if the key has disappeared meanwhile, it is written again).

**Expiry.** A global key expires at the earlier of the board's own expiry
(windowed boards) and ``ttl_ms`` after the pass that last wrote or refreshed
it. The second bound is a freshness guard: when the merger stops, its keys
vanish within ``ttl_ms`` and readers fall back to merging the shards live,
instead of serving an ever older top-K.

**Games.** Every game of the catalog with ``shards > 1``, plus games served by
the catalog's ``[default]`` found by scanning for their shard-0 registry
``<ns>:{<game>/0}:meta:boards`` (:meth:`TopKMerger.discover`; a ``SCAN`` of
the whole keyspace, so the driver repeats it rarely, not every pass).
**Windows** come from the shards' ``meta:boards`` registries, less the ones
the game does not keep or whose boards have expired (:func:`domain.topk.live_windows`).

Run one merger per namespace: two would only rewrite the same keys, but the
slower one could briefly put back an older top-K.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from adapters.redis import RedisClient, Script, as_cluster, node_of, text
from domain.errors import QueryError, ServiceError
from domain.games import GameCatalog, GameConfig
from domain.keys import GroupKeys
from domain.ranking import Member
from domain.topk import DEFAULT_K, global_top_key, live_windows, merge_shard_tops, stored_members
from domain.windows import Window
from readers.board_reads import execute, members_with_scores
from readers.boards import Board, BoardReader

__all__ = ["WRITE_TOP", "MergeReport", "TopKMerger", "glob_escape"]

#: KEYS[1] the global top-K key. ARGV[1] expire-at in epoch ms ('0': none),
#: ARGV[2..] composite, playerId, composite, playerId, ... in any order.
#: Returns the number of members written (0: the key was deleted).
WRITE_TOP = Script(
    """
redis.call('DEL', KEYS[1])
local n = #ARGV
for i = 2, n, 1000 do
  redis.call('ZADD', KEYS[1], unpack(ARGV, i, math.min(i + 999, n)))
end
if n > 1 and ARGV[1] ~= '0' then redis.call('PEXPIREAT', KEYS[1], ARGV[1]) end
return (n - 1) / 2
"""
)

#: Default freshness guard of a global key: it outlives a few missed passes, no more.
DEFAULT_TTL_MS = 5_000


def glob_escape(text_: str) -> str:
    """``text_`` as a literal inside a Redis ``SCAN MATCH`` pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text_)


def _tag_of(key: str) -> str:
    return key.split("{", 1)[1].split("}", 1)[0]


@dataclass
class MergeReport:
    """What one pass did."""

    games: int = 0
    windows: int = 0
    #: Global keys (re)written, including deletions of boards that became empty.
    written: int = 0
    #: Global keys whose content had not changed: only their expiry was extended.
    unchanged: int = 0
    #: Members read from the shards.
    read: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "games": self.games,
            "windows": self.windows,
            "written": self.written,
            "unchanged": self.unchanged,
            "read": self.read,
            "seconds": round(self.seconds, 4),
        }


@dataclass(frozen=True, slots=True)
class _Target:
    board: Board
    key: str
    expire_at_ms: int  # 0: no expiry


class TopKMerger:
    """Keeps ``<ns>:{<game>}:top:<window id>`` equal to the first K + 1 of each sharded board.

    Stateless towards Redis (everything it needs is re-read every pass); in
    memory it only remembers which games exist and a digest of what it last
    wrote per key, to skip rewriting an unchanged top-K.
    """

    def __init__(
        self,
        client: RedisClient,
        catalog: GameCatalog,
        namespace: str,
        *,
        k: int = DEFAULT_K,
        ttl_ms: int = DEFAULT_TTL_MS,
    ) -> None:
        stored_members(k)  # validates k
        if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 0:
            raise ValueError(f"ttl_ms must be an integer >= 0, got {ttl_ms!r}")
        self._client: RedisClient = client
        self._catalog = catalog
        self._reader = BoardReader(client, catalog, namespace)
        self.namespace = namespace
        self.k = k
        self.ttl_ms = ttl_ms
        self._cluster = isinstance(client, RedisCluster)
        self._games: list[str] | None = None
        self._digests: dict[str, int] = {}

    # -- discovery --------------------------------------------------------------------

    def discover(self) -> list[str]:
        """The sharded games: configured ones plus those found by their shard-0 registry."""
        found = {game for game, config in self._catalog.games().items() if config.shards > 1}
        pattern = f"{glob_escape(self.namespace)}:{{*/0}}:meta:boards"
        try:
            for raw in self._client.scan_iter(match=pattern, count=1000):
                game = _tag_of(text(raw)).rsplit("/", 1)[0]
                config = self._catalog.lookup(game)
                if config is not None and config.shards > 1:
                    found.add(game)
        except (redis.RedisError, RedisClusterException) as exc:
            raise ServiceError(f"Redis scan failed: {exc}") from exc
        self._games = sorted(found)
        return list(self._games)

    # -- one pass ---------------------------------------------------------------------

    def run_once(self, now_ms: int, games: Sequence[str] | None = None) -> MergeReport:
        """Merge every live window of ``games`` (default: the last :meth:`discover`)."""
        started = time.perf_counter()
        if games is None:
            games = self._games if self._games is not None else self.discover()
        configs = [(g, c) for g in games if (c := self._catalog.lookup(g)) and c.shards > 1]
        report = MergeReport(games=len(configs))
        targets = self._targets(configs, now_ms)
        report.windows = len(targets)
        if targets:
            tops = self._read_tops(targets)
            report.read = sum(len(page) for pages in tops for page in pages)
            merged = [merge_shard_tops(pages, self.k) for pages in tops]
            report.written, report.unchanged = self._write(targets, merged)
        live = {t.key for t in targets}
        self._digests = {key: d for key, d in self._digests.items() if key in live}
        report.seconds = time.perf_counter() - started
        return report

    def _targets(self, configs: list[tuple[str, GameConfig]], now_ms: int) -> list[_Target]:
        """Every (game, live window) to merge, from the shards' registries (one round trip)."""
        if not configs:
            return []
        pipe = self._client.pipeline(transaction=False)
        for game, config in configs:
            for shard in range(config.shards):
                pipe.smembers(GroupKeys(self.namespace, f"{game}/{shard}").boards)
        answers = execute(pipe)
        targets: list[_Target] = []
        at = 0
        for game, config in configs:
            ids = {text(m) for answer in answers[at : at + config.shards] for m in answer}
            at += config.shards
            for window in live_windows(ids, config, now_ms):
                try:
                    board = self._reader.board(game, window.id, now_ms)
                except QueryError:  # pragma: no cover - live_windows keeps only kept kinds
                    continue
                key = global_top_key(self.namespace, game, window.id)
                targets.append(_Target(board, key, self._expire_at(config, window, now_ms)))
        return targets

    def _expire_at(self, config: GameConfig, window: Window, now_ms: int) -> int:
        bounds = [now_ms + self.ttl_ms] if self.ttl_ms else []
        board_expiry = config.expire_at_ms(window)
        if board_expiry is not None:
            bounds.append(board_expiry)
        return min(bounds) if bounds else 0

    def _read_tops(self, targets: list[_Target]) -> list[list[list[Member]]]:
        """Per target, per shard: the shard's first K + 1 members (one pipelined trip)."""
        depth = stored_members(self.k)
        pipe = self._client.pipeline(transaction=False)
        for target in targets:
            for key in target.board.keys:
                pipe.zrevrange(key, 0, depth - 1, withscores=True)
        answers = iter(execute(pipe))
        return [
            [members_with_scores(next(answers)) for _ in target.board.keys] for target in targets
        ]

    # -- writing ------------------------------------------------------------------------

    def _write(self, targets: list[_Target], merged: list[list[Member]]) -> tuple[int, int]:
        """Write changed keys, extend the expiry of unchanged ones; returns (written, unchanged)."""
        changed: list[tuple[_Target, list[Member], int]] = []
        kept: list[tuple[_Target, list[Member], int]] = []
        for target, members in zip(targets, merged, strict=True):
            digest = hash(tuple((m.player_id, m.composite) for m in members))
            same = self._digests.get(target.key) == digest
            (kept if same else changed).append((target, members, digest))
        ops: list[tuple[str, Callable[[Any, Any], None]]] = []
        for target, members, _ in changed:
            ops.append((target.key, _write_op(target, members)))
        # An empty board has no key to refresh (the script deleted it): nothing to do.
        kept = [entry for entry in kept if entry[1]]
        unchanged = len(targets) - len(changed)
        for target, _, _ in kept:
            ops.append((target.key, _refresh_op(target)))
        results = self._run(ops)
        missing = [
            entry
            for entry, found in zip(kept, results[len(changed) :], strict=True)
            if not int(found)
        ]
        if missing:  # deleted meanwhile (rebuild swap, expiry): write it again now
            self._run([(t.key, _write_op(t, members)) for t, members, _ in missing])
        for target, _, digest in changed + missing:
            self._digests[target.key] = digest
        return len(changed) + len(missing), unchanged - len(missing)

    def _run(self, ops: list[tuple[str, Callable[[Any, Any], None]]]) -> list[Any]:
        """Queue ``ops`` on one pipeline per node (scripts included); results in op order.

        redis-py's cluster pipeline refuses scripts, so on a cluster each op
        goes to its key's master on that node's own connection. Every op
        touches one key, so a retry after a topology change is harmless.
        """
        if not ops:
            return []
        if not self._cluster:
            pipe = self._client.pipeline(transaction=False)
            script = WRITE_TOP.registered(self._client)
            for _, op in ops:
                op(pipe, script)
            return execute(pipe)
        cluster = as_cluster(self._client)
        for attempt in range(3):
            by_node: dict[str, tuple[Any, Any, list[int]]] = {}
            for index, (key, _) in enumerate(ops):
                name, conn = node_of(cluster, key)
                entry = by_node.get(name)
                if entry is None:
                    entry = by_node[name] = (
                        conn.pipeline(transaction=False),
                        WRITE_TOP.registered(conn),
                        [],
                    )
                entry[2].append(index)
            results: list[Any] = [None] * len(ops)
            try:
                for pipe, script, indices in by_node.values():
                    for index in indices:
                        ops[index][1](pipe, script)
                    for index, result in zip(indices, pipe.execute(), strict=True):
                        results[index] = result
                return results
            except (redis.ConnectionError, redis.ResponseError) as exc:
                if attempt == 2:
                    raise ServiceError(f"Redis Cluster write failed: {exc}") from exc
                cluster.nodes_manager.initialize()
            except redis.RedisError as exc:
                raise ServiceError(f"Redis write failed: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover


def _write_op(target: _Target, members: list[Member]) -> Callable[[Any, Any], None]:
    args: list[Any] = [target.expire_at_ms]
    for member in members:
        args += [member.composite, member.player_id]

    def op(pipe: Any, script: Any) -> None:
        script(keys=[target.key], args=args, client=pipe)

    return op


def _refresh_op(target: _Target) -> Callable[[Any, Any], None]:
    def op(pipe: Any, script: Any) -> None:
        if target.expire_at_ms:
            pipe.pexpireat(target.key, target.expire_at_ms)
        else:
            pipe.exists(target.key)

    return op
