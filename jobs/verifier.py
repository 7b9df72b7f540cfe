"""``lb verify``: audit the live projection against a replay of the log.

The log is replayed into a scratch namespace with the job's own code path
(:class:`~domain.validation.Validator`, :class:`~domain.planner.BoardPlanner`,
:class:`~sinks.boards.store.RedisBoardStore` and its Lua write), then every
board member, value and counter (and every tournament's attempts and seats)
is compared with the live keys. Live keys are only ever read.

A live job keeps writing meanwhile, so the replay stops, per board group and
source partition, at the watermark the live group holds (offsets both sides
applied). A group that never saw a partition is compared up to the
partition's progress offset (the job says it applied everything before it),
or up to the end of the log when Redis holds no progress at all (flushed).

The comparison runs in two passes. The first streams each board in chunks
(``ZSCAN`` one side, ``ZMSCORE`` the other), so memory stays bounded at 10M
players; a busy group moves while it is read, so what differs is only a
suspect. The second pass reads the suspects of a group atomically with its
watermarks and counters (one Lua call), replays the scratch side up to
exactly those watermarks, and compares again: what still differs is a real
difference at one common point of the log.
"""

from __future__ import annotations

import operator
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import redis

from adapters.kafka import LogReader
from adapters.redis import RedisClient, Script, text, text_of
from domain.erasure import is_erasure
from domain.errors import ServiceError
from domain.healing import PROGRESS_FIELD
from domain.keys import ENTRY_METADATA, GroupKeys, group_tag, progress_key, tag_of
from domain.planner import BoardPlanner
from domain.records import Accepted, RecordBatch
from domain.validation import Validator
from jobs import dense_counts
from jobs.dead_letter_reader import Letter
from jobs.namespace_swap import drop_namespace
from jobs.replay import apply_replayed
from jobs.topk_merger import glob_escape
from jobs.verify_report import (
    Difference,
    VerifyReport,
    counter_diffs,
    difference,
    explain_redrives,
    rejudged,
    text_difference,
)
from sinks.boards import RedisBoardStore

#: Members per ZSCAN/ZMSCORE chunk (first pass) and per atomic re-read (second pass).
CHUNK = 5_000
SETTLE_CHUNK = 2_000

#: Reads a group's watermarks, counters and some members' values in one atomic call
#: (board members, or fields of a tournament's attempts or seats hash).
READ_AT_ONCE = Script(
    """
-- KEYS[1] meta:wm, KEYS[2] meta:stats, KEYS[3..] boards or count hashes;
-- ARGV: per key n, member*
local out = {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
local i = 1
for k = 3, #KEYS do
  local n = tonumber(ARGV[i]); i = i + 1
  if n > 0 and redis.call('TYPE', KEYS[k])['ok'] == 'hash' then
    table.insert(out, redis.call('HMGET', KEYS[k], unpack(ARGV, i, i + n - 1)))
  elseif n > 0 then
    table.insert(out, redis.call('ZMSCORE', KEYS[k], unpack(ARGV, i, i + n - 1)))
  else
    table.insert(out, {})
  end
  i = i + n
end
return out
"""
)


#: ``(records so far, records in all)``: called now and then while replaying.
Progress = Callable[[int, int], None]


class Verifier:
    """One audit of ``namespace`` against the log of ``topic`` (see the module docstring)."""

    def __init__(
        self,
        client: RedisClient,
        log: LogReader,
        validator: Validator,
        namespace: str,
        *,
        topic: str,
        dedupe_horizon_ms: int,
        cache_players: int,
        games: Sequence[str] = (),
        progress: Progress | None = None,
        letters: Callable[[], Sequence[Letter]] | None = None,
    ) -> None:
        self._client = client
        self._letters = letters
        self._log = log
        self._validator = validator
        self._namespace = namespace
        self._topic = topic
        self._games = set(games)
        self._progress = progress
        self.scratch = f"{namespace}~verify-{uuid.uuid4().hex[:8]}"
        self._store = RedisBoardStore(client, sort_members=True)
        self._planner = BoardPlanner(
            self.scratch, dedupe_horizon_ms, cache_players, games=validator.catalog.lookup
        )
        #: Per tag, per partition: the last offset the scratch side was replayed to.
        self._cut: dict[str, dict[int, int]] = {}
        self._default: dict[int, int] = {}
        self._records = 0

    # -- the whole audit ---------------------------------------------------------------

    def run(self) -> VerifyReport:
        """Replay, compare, settle; the scratch namespace is deleted whatever happens."""
        started = time.monotonic()
        try:
            self._cutoffs()
            self._replay_all()
            report = VerifyReport()
            suspects: dict[str, list[Difference]] = {}
            for tag in self._tags():
                report.groups += 1
                report.games.add(tag.split("/", 1)[0])
                found = self._compare(tag, report)
                if found:
                    suspects[tag] = found
            for tag, found in suspects.items():
                report.differences += self._settle(tag, found)
            report.differences += self._compare_game_counts()
            if self._letters is not None and any(d.kind == "counter" for d in report.differences):
                explain_redrives(report, rejudged(self._validator, self._letters(), self._topic))
            report.records = self._records
            report.seconds = time.monotonic() - started
            return report
        finally:
            drop_namespace(self._client, self.scratch)

    # -- what to replay ----------------------------------------------------------------

    def _wanted(self, tag: str) -> bool:
        return not self._games or tag.split("/", 1)[0] in self._games

    def _cutoffs(self) -> None:
        """Live watermarks per group; for the rest, the progress offset or the log's end."""
        try:
            for raw in self._client.scan_iter(match=f"{self._namespace}:*:meta:wm", count=1000):
                key = text(raw)
                tag = tag_of(key)
                if not self._wanted(tag):
                    continue
                cut = self._cut.setdefault(tag, {})
                for name, value in self._client.hgetall(key).items():
                    topic, _, part = (text(name)).rpartition("/")
                    if topic == self._topic:
                        cut[int(part)] = int(value)
            ends = self._log.ends()
            # A tournament's max_entries is split into seats per partition.
            self._planner.know_partitions(self._topic, len(ends))
            for p, end in ends.items():
                progress = self._store.read_progress(progress_key(self._namespace, self._topic, p))
                self._default[p] = progress.get(PROGRESS_FIELD, end - 1)
        except redis.RedisError as exc:
            raise ServiceError(f"reading the live watermarks failed: {exc}") from exc

    def _limit(self, tag: str, partition: int) -> int:
        return self._cut.get(tag, {}).get(partition, self._default.get(partition, -1))

    def _replay_all(self) -> None:
        stops = dict(self._default)
        for cut in self._cut.values():
            for p, offset in cut.items():
                stops[p] = max(stops.get(p, -1), offset)
        total = sum(stop + 1 for stop in stops.values())
        limits: dict[str, dict[int, int]] = {}

        def within(tag: str, partition: int, offset: int) -> bool:
            if not self._wanted(tag):
                return False
            per = limits.setdefault(tag, {})
            if partition not in per:
                per[partition] = self._limit(tag, partition)
            return offset <= per[partition]

        def keep(rec: Accepted, partition: int) -> bool:
            # An erasure reaches each group up to that group's own cut (below).
            return is_erasure(rec) or within(group_tag(rec), partition, rec.offset)

        self._planner.erasure_reach = within

        last_report = 0.0
        for batch in self._log.read({p: (0, stop) for p, stop in stops.items()}):
            self._apply(batch, keep)
            now = time.monotonic()
            if self._progress is not None and now - last_report >= 1.0:
                last_report = now
                self._progress(self._records, total)
        for tag, per in limits.items():
            self._cut.setdefault(tag, {}).update(per)
        if self._progress is not None:
            self._progress(self._records, total)

    def _apply(self, batch: RecordBatch, keep: Callable[[Accepted, int], bool]) -> None:
        """The sink's write path, into the scratch namespace."""
        self._records += len(batch.records)
        apply_replayed(
            batch,
            self._validator,
            self._planner,
            self._store,
            lambda rec: keep(rec, batch.partition),
            self.scratch,
        )

    def _extend(self, tag: str, upto: dict[int, int]) -> None:
        """Replay ``tag``'s records of each partition up to ``upto`` (from its current cut)."""
        cut = self._cut.setdefault(tag, {})
        ranges = {
            p: (self._limit(tag, p) + 1, offset)
            for p, offset in upto.items()
            if offset > self._limit(tag, p)
        }
        if not ranges:
            return

        def keep(rec: Accepted, partition: int) -> bool:
            return (is_erasure(rec) or group_tag(rec) == tag) and rec.offset <= ranges[partition][1]

        self._planner.erasure_reach = lambda group, partition, offset: group == tag

        for batch in self._log.read(ranges):
            self._apply(batch, keep)
        for p, (_, last) in ranges.items():
            cut[p] = last

    # -- comparing ---------------------------------------------------------------------

    def _tags(self) -> list[str]:
        """Every group either side has (live watermarks, or the scratch replay)."""
        found = set(self._cut)
        for raw in self._client.scan_iter(match=f"{self.scratch}:*:meta:wm", count=1000):
            found.add(tag_of(text(raw)))
        return sorted(tag for tag in found if self._wanted(tag))

    def _windows(self, tag: str) -> list[str]:
        live, scratch = GroupKeys(self._namespace, tag), GroupKeys(self.scratch, tag)
        out: set[str] = set()
        for key in (live.boards, scratch.boards):
            out |= {text(m) for m in self._client.smembers(key)}
        return sorted(out)

    def _dense_floors(self, tag: str) -> list[str]:
        """The distinct-floor sets of dense-ranked boards either side has (compared like boards)."""
        names: set[str] = set()
        for keys in (GroupKeys(self._namespace, tag), GroupKeys(self.scratch, tag)):
            pattern = f"{glob_escape(keys.prefix)}meta:dense:s:*"
            for raw in self._client.scan_iter(match=pattern, count=1000):
                names.add(text_of(raw)[len(keys.prefix) :])
        return sorted(names)

    def _compare(self, tag: str, report: VerifyReport) -> list[Difference]:
        """First pass: stream every board of the group both ways; suspects only."""
        live, scratch = GroupKeys(self._namespace, tag), GroupKeys(self.scratch, tag)
        out: list[Difference] = []
        for window in self._windows(tag) + self._dense_floors(tag):
            live_key, scratch_key = live.board(window), scratch.board(window)
            if not (self._client.exists(live_key) or self._client.exists(scratch_key)):
                continue  # expired on both sides
            report.boards += 1
            for chunk in _chunks(self._client.zscan_iter(live_key, count=CHUNK), CHUNK):
                report.members += len(chunk)
                players = [text_of(m) for m, _ in chunk]
                expected = self._client.zmscore(scratch_key, players)
                for player, (_, value), want in zip(players, chunk, expected, strict=True):
                    if want is None:
                        out.append(Difference(tag, window, player, "extra", int(value), None))
                    elif int(want) != int(value):
                        out.append(
                            Difference(tag, window, player, "wrong value", int(value), int(want))
                        )
            for chunk in _chunks(self._client.zscan_iter(scratch_key, count=CHUNK), CHUNK):
                players = [text_of(m) for m, _ in chunk]
                present = self._client.zmscore(live_key, players)
                for player, (_, want), value in zip(players, chunk, present, strict=True):
                    if value is None:
                        out.append(Difference(tag, window, player, "missing", None, int(want)))
        out += self._compare_counts(tag, report)
        out += self._compare_metadata(tag)
        out += counter_diffs(tag, self._stats(live.stats), self._stats(scratch.stats))
        return out

    def _compare_game_counts(self) -> list[Difference]:
        """Sharded dense games: the game-wide counts against their shards' (``jobs.dense_counts``).

        Each shard's own counts are compared with the log above, like any group's.
        """
        out: list[Difference] = []
        games = {tag.rpartition("/")[0] for tag in self._tags() if "/" in tag}
        for game in sorted(games):
            config = self._validator.catalog.lookup(game)
            if config is not None and config.dense_ranks and config.shards > 1:
                out += dense_counts.check(self._client, self._namespace, game, config.shards)
        return out

    def _compare_metadata(self, tag: str) -> list[Difference]:
        """Boards' entry metadata, both ways in chunks; suspects only (board ``meta:entry:<w>``)."""
        names = self._hash_names(tag, (ENTRY_METADATA,))
        return self._compare_hashes(tag, names, operator.eq, text_difference)

    def _compare_counts(self, tag: str, report: VerifyReport) -> list[Difference]:
        """Count hashes both ways in chunks; suspects only.

        Tournaments' attempts and seats, and a dense-ranked board's distinct-score
        counts (``meta:dense:n:``: members per score floor and ``#``, all counted).
        """
        names = self._hash_names(tag, ("meta:attempts:", "meta:entries:", "meta:dense:n:"))
        report.boards += len(names)
        return self._compare_hashes(tag, names, lambda a, b: int(a) == int(b), difference)

    def _hash_names(self, tag: str, prefixes: Sequence[str]) -> list[str]:
        """The key suffixes after ``{tag}:`` of the hashes either side has with these prefixes."""
        names: set[str] = set()
        for keys in (GroupKeys(self._namespace, tag), GroupKeys(self.scratch, tag)):
            for prefix in prefixes:
                pattern = f"{glob_escape(keys.prefix)}{prefix}*"
                for raw in self._client.scan_iter(match=pattern, count=1000):
                    names.add(text_of(raw)[len(keys.prefix) :])
        return sorted(names)

    def _compare_hashes(
        self,
        tag: str,
        names: list[str],
        same: Callable[[Any, Any], bool],
        differ: Callable[[str, str, str, Any, Any], Difference],
    ) -> list[Difference]:
        """Each named hash field by field, live against scratch and back; suspects only."""
        live, scratch = GroupKeys(self._namespace, tag), GroupKeys(self.scratch, tag)
        out: list[Difference] = []
        for name in names:
            live_key, scratch_key = live.board(name), scratch.board(name)
            for first, second, live_first in (
                (live_key, scratch_key, True),
                (scratch_key, live_key, False),
            ):
                for chunk in _chunks(self._client.hscan_iter(first, count=CHUNK), CHUNK):
                    fields = [text_of(f) for f, _ in chunk]
                    others = self._client.hmget(second, fields)
                    for field_name, (_, value), other in zip(fields, chunk, others, strict=True):
                        if other is not None and (not live_first or same(other, value)):
                            continue
                        got, want = (value, other) if live_first else (other, value)
                        out.append(differ(tag, name, field_name, got, want))
        return out

    def _settle(self, tag: str, suspects: list[Difference]) -> list[Difference]:
        """Second pass: re-read suspects atomically with the watermarks, replay up to them."""
        members = [d for d in suspects if d.kind != "counter"]
        out: list[Difference] = []
        chunks = [members[i : i + SETTLE_CHUNK] for i in range(0, len(members), SETTLE_CHUNK)]
        for number, chunk in enumerate(chunks or [[]]):
            with_counters = number == len(chunks or [[]]) - 1
            out += self._settle_chunk(tag, chunk, with_counters)
        return out

    def _settle_chunk(
        self, tag: str, suspects: list[Difference], with_counters: bool
    ) -> list[Difference]:
        live, scratch = GroupKeys(self._namespace, tag), GroupKeys(self.scratch, tag)
        by_window: dict[str, list[str]] = {}
        for diff in suspects:
            by_window.setdefault(diff.board, []).append(diff.player)
        windows = sorted(by_window)
        args: list[Any] = []
        for window in windows:
            args += [len(by_window[window]), *by_window[window]]
        keys = [live.watermarks, live.stats, *(live.board(w) for w in windows)]
        answer = READ_AT_ONCE(self._client, keys, args)
        watermarks = _pairs(answer[0])
        live_stats = {name: int(v) for name, v in _pairs(answer[1]).items()}
        upto: dict[int, int] = {}
        for name, value in watermarks.items():
            topic, _, part = name.rpartition("/")
            if topic == self._topic:
                upto[int(part)] = int(value)
        self._extend(tag, upto)
        out: list[Difference] = []
        for window, values in zip(windows, answer[2:], strict=True):
            players = by_window[window]
            expected: list[Any]
            if window.startswith("meta:") and not window.startswith("meta:dense:s:"):
                # a hash: a tournament's counts, a board's distinct scores, entry metadata
                expected = self._client.hmget(scratch.board(window), players)
            else:
                expected = self._client.zmscore(scratch.board(window), players)
            if window.startswith(ENTRY_METADATA):
                for player, value, want in zip(players, values, expected, strict=True):
                    if value != want:
                        out.append(text_difference(tag, window, player, value, want))
                continue
            for player, value, want in zip(players, values, expected, strict=True):
                got = None if value is None else int(float(value))
                wanted = None if want is None else int(want)
                if got == wanted:
                    continue
                kind = "missing" if got is None else "extra" if wanted is None else "wrong value"
                out.append(Difference(tag, window, player, kind, got, wanted))
        if with_counters:
            out += counter_diffs(tag, live_stats, self._stats(scratch.stats))
        return out

    def _stats(self, key: str) -> dict[str, int]:
        return {text_of(k): int(v) for k, v in self._client.hgetall(key).items()}


def _pairs(flat: Sequence[Any]) -> dict[str, Any]:
    return {text_of(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


__all__ = ["Verifier"]
