"""The atomic cut-over of one board group (``jobs.cutover``) against real Redis:
which watermark it writes for each live/staged position, and what moves."""

from __future__ import annotations

import pytest

from adapters.redis import RedisClient, text
from jobs import cutover
from jobs.cutover import BEHIND, FOREIGN, Replaced, fill_group, replace_group

T = "score-events"


def _group(client: RedisClient, ns: str, wm: dict[str, int], member: str, extra: str = "") -> None:
    client.hset(f"{ns}:{{g}}:meta:wm", mapping=wm)
    client.zadd(f"{ns}:{{g}}:alltime", {member: 1})
    client.hset(f"{ns}:{{g}}:meta:stats", mapping={"applied": 1})
    if extra:
        client.zadd(f"{ns}:{{g}}:{extra}", {member: 1})


@pytest.mark.parametrize(
    ("live", "low", "through", "relaxed", "expected"),
    [
        (5, 4, 9, False, 9),  # the live job behind: the replay's last offset
        (9, 4, 9, False, 8),  # level, nothing of the group at 9: one below, noticed as a loss
        (9, 9, 9, False, BEHIND),  # level, 9 is the group's: read on
        (12, 4, 9, False, BEHIND),  # the live job ahead: read on
        (12, 4, 9, True, 9),  # relaxed: behind it (it heals as after a loss)
        (9, 9, 9, True, 9),  # relaxed, level: equal (reported)
    ],
)
def test_the_new_watermark_differs_from_the_live_one_when_it_can(
    redis_client: RedisClient,
    namespace: str,
    live: int,
    low: int,
    through: int,
    relaxed: bool,
    expected: int,
) -> None:
    stage = f"{namespace}~s"
    _group(redis_client, namespace, {f"{T}/0": live, f"{T}/1": 3}, "old", extra="daily:2026-05-03")
    _group(redis_client, stage, {f"{T}/0": low, f"{T}/1": 3}, "new")
    redis_client.expire(f"{stage}:{{g}}:alltime", 5000)
    try:
        answer = replace_group(
            redis_client, stage, namespace, "g", T, {0: through, 1: 7}, relaxed=relaxed
        )
        wm = {
            text(k): int(v) for k, v in redis_client.hgetall(f"{namespace}:{{g}}:meta:wm").items()
        }
        board = redis_client.zrange(f"{namespace}:{{g}}:alltime", 0, -1)
        if expected == BEHIND:
            assert answer == BEHIND
            assert wm == {f"{T}/0": live, f"{T}/1": 3} and board == [b"old"]  # untouched
            return
        assert isinstance(answer, Replaced)
        assert answer.unnoticed == (expected == live)
        assert wm == {f"{T}/0": expected, f"{T}/1": 7}
        assert board == [b"new"]
        assert 0 < redis_client.ttl(f"{namespace}:{{g}}:alltime") <= 5000  # RENAME keeps it
        assert not redis_client.exists(f"{namespace}:{{g}}:daily:2026-05-03")  # not replayed
        assert not list(redis_client.scan_iter(match=f"{stage}:*"))
    finally:
        for key in redis_client.scan_iter(match=f"{stage}:*"):
            redis_client.delete(key)


def test_keys_the_live_job_makes_while_the_group_is_listed_do_not_survive(
    redis_client: RedisClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live write between the listing of the keys and the call (here: a new
    dedupe bag holding a record after ``through``) must not outlive the cut-over:
    the live job re-applies that record, and the bag would make it a copy of itself."""
    stage = f"{namespace}~s"
    _group(redis_client, namespace, {f"{T}/0": 12}, "old")
    _group(redis_client, stage, {f"{T}/0": 4}, "new")
    bag = f"{namespace}:{{g}}:meta:seen:77:3"
    listings: list[str] = []
    listed = cutover.group_keys

    def listing_then_a_live_write(client: RedisClient, ns: str, tag: str) -> list[str]:
        keys = listed(client, ns, tag)
        listings.append(ns)
        if ns == namespace and listings.count(namespace) == 1:
            redis_client.hset(bag, "5", b"\x00" * 9)  # what a write of offset 13 appends
            redis_client.hset(f"{namespace}:{{g}}:meta:wm", f"{T}/0", 13)
        return keys

    monkeypatch.setattr(cutover, "group_keys", listing_then_a_live_write)
    try:
        answer = replace_group(redis_client, stage, namespace, "g", T, {0: 9}, relaxed=True)
        assert isinstance(answer, Replaced)
        assert listings.count(namespace) == 2  # listed again after the write
        assert not redis_client.exists(bag)
        assert redis_client.hget(f"{namespace}:{{g}}:meta:wm", f"{T}/0") == b"9"
        assert redis_client.zrange(f"{namespace}:{{g}}:alltime", 0, -1) == [b"new"]
    finally:
        for key in redis_client.scan_iter(match=f"{stage}:*"):
            redis_client.delete(key)


def test_a_group_with_another_topics_watermarks_is_left_alone(
    redis_client: RedisClient, namespace: str
) -> None:
    stage = f"{namespace}~s"
    _group(redis_client, namespace, {f"{T}/0": 1, "export/0": 5}, "old")
    _group(redis_client, stage, {f"{T}/0": 4}, "new")
    try:
        assert (
            replace_group(redis_client, stage, namespace, "g", T, {0: 9}, relaxed=True) == FOREIGN
        )
        assert redis_client.zrange(f"{namespace}:{{g}}:alltime", 0, -1) == [b"old"]
    finally:
        for key in redis_client.scan_iter(match=f"{stage}:*"):
            redis_client.delete(key)


def test_fill_moves_only_boards_the_live_group_lacks(
    redis_client: RedisClient, namespace: str
) -> None:
    stage = f"{namespace}~s"
    _group(redis_client, namespace, {f"{T}/0": 50}, "live")
    _group(redis_client, stage, {f"{T}/0": 9}, "staged", extra="daily:2026-05-03")
    # Entry metadata moves with its board, and only with it.
    redis_client.hset(f"{stage}:{{g}}:meta:entry:daily:2026-05-03", "staged", "car=red")
    redis_client.hset(f"{stage}:{{g}}:meta:entry:alltime", "staged", "car=blue")
    try:
        result = fill_group(redis_client, stage, namespace, "g")
        assert result.moved == ["daily:2026-05-03"] and result.kept == ["alltime"]
        assert redis_client.zrange(f"{namespace}:{{g}}:alltime", 0, -1) == [b"live"]
        assert redis_client.zrange(f"{namespace}:{{g}}:daily:2026-05-03", 0, -1) == [b"staged"]
        assert redis_client.hgetall(f"{namespace}:{{g}}:meta:entry:daily:2026-05-03") == {
            b"staged": b"car=red"
        }
        assert not redis_client.exists(f"{namespace}:{{g}}:meta:entry:alltime")
        assert redis_client.smembers(f"{namespace}:{{g}}:meta:boards") == {b"daily:2026-05-03"}
        assert redis_client.hget(f"{namespace}:{{g}}:meta:wm", f"{T}/0") == b"50"
    finally:
        for key in redis_client.scan_iter(match=f"{stage}:*"):
            redis_client.delete(key)
