"""``sinks.wire.RawPipeline`` against the real Redis: order, deferred replies, NOSCRIPT."""

from __future__ import annotations

import hiredis
from redis.exceptions import ResponseError

from adapters.redis import RedisClient, Script
from sinks.wire import RawPipeline
from tests.poll import poll

INCR = Script("return redis.call('INCRBY', KEYS[1], ARGV[1])")


def test_sent_commands_run_before_later_ones_and_their_replies_come_first(
    redis_client: RedisClient, namespace: str
) -> None:
    wire = RawPipeline(redis_client)
    key = f"{namespace}:{{w}}:n"
    wire.send([("INCRBY", key, 5), ("INCRBY", key, 2)])
    # Redis applied the sent commands before the ones sent behind them.
    assert wire.run([("GET", key)]) == [5, 7, b"7"]
    assert wire.run([]) == []


def test_a_command_packed_already_goes_out_as_is_in_its_place(
    redis_client: RedisClient, namespace: str
) -> None:
    wire = RawPipeline(redis_client, writes_in_flight=1)
    key = f"{namespace}:{{w}}:z"
    packed = hiredis.pack_command(("ZADD", key, 2, "b", 1, "a"))
    wire.send([("ZADD", key, 3, "c"), packed])
    assert wire.run([packed, ("ZRANGE", key, 0, -1)]) == [1, 2, 0, [b"a", b"b", b"c"]]


def test_error_replies_come_back_in_place_and_the_connection_stays_usable(
    redis_client: RedisClient, namespace: str
) -> None:
    wire = RawPipeline(redis_client)
    key = f"{namespace}:{{w}}:s"
    replies = wire.run([("SET", key, "x"), ("INCR", key), ("GET", key)])
    assert replies[0] is True or replies[0] == b"OK"
    assert isinstance(replies[1], ResponseError)
    assert replies[2] == b"x"
    assert wire.run([("GET", key)]) == [b"x"]


def test_a_script_is_loaded_again_after_redis_forgot_it(
    redis_client: RedisClient, namespace: str
) -> None:
    wire = RawPipeline(redis_client)
    key = f"{namespace}:{{w}}:e"
    assert wire.eval_many(INCR, [([key], [1])]) == [1]
    redis_client.script_flush()
    assert wire.eval_many(INCR, [([key], [2]), ([key], [3])]) == [3, 6]


def test_a_script_object_runs_by_sha_and_reloads_after_noscript(
    redis_client: RedisClient, namespace: str
) -> None:
    key = f"{namespace}:{{w}}:x"
    redis_client.script_flush()
    assert INCR(redis_client, [key], [4]) == 4  # NOSCRIPT, loaded, run again
    assert redis_client.script_exists(INCR.sha) == [True]
    redis_client.script_flush()
    assert INCR(redis_client, [key], [1]) == 5


async def _async_incr(url: str, key: str) -> list[int]:
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    try:
        await client.script_flush()
        return [
            await INCR.run_async(client, [key], [2]),
            await INCR.run_async(client, [key], [3]),
        ]
    finally:
        await client.aclose()


def test_a_script_object_runs_on_an_asyncio_client_too(
    redis_url: str, redis_client: RedisClient, namespace: str
) -> None:
    import asyncio

    key = f"{namespace}:{{w}}:y"  # deleted with the namespace by redis_client
    assert asyncio.run(_async_incr(redis_url, key)) == [2, 5]


def test_paced_script_calls_have_all_left_when_send_returns_and_replies_come_in_order(
    redis_client: RedisClient, namespace: str
) -> None:
    key = f"{namespace}:{{w}}:p"
    paced, unpaced = RawPipeline(redis_client, writes_in_flight=1), RawPipeline(redis_client)
    calls = paced.evals(INCR, [([key], [1]), ([key], [10])])
    paced.send([*calls, ("INCRBY", key, 100)])
    # send waited for the first call's reply to let the second go, and the
    # command behind it went with it: another connection sees every effect
    # now, with no later call to carry them (the order of leaving is proven
    # against a fake connection in tests/unit/test_wire_pace.py).
    poll("every command applied", lambda: redis_client.get(key) == b"111", 10, every_s=0.01)
    assert paced.run([("GET", key)]) == [1, 11, 111, b"111"]

    unpaced.send([*calls, ("INCRBY", key, 100)])
    # Everything left at once: Redis runs it all before any reply is read.
    poll("every command applied", lambda: redis_client.get(key) == b"222", 10, every_s=0.01)
    assert unpaced.run([]) == [112, 122, 222]
