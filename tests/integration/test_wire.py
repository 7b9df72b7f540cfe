"""``sinks.wire.RawPipeline`` against the real Redis: order, deferred replies, NOSCRIPT."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from sinks.wire import RawPipeline

INCR = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


def test_sent_commands_run_before_later_ones_and_their_replies_come_first(
    redis_client: Any, namespace: str
) -> None:
    wire = RawPipeline(redis_client)
    key = f"{namespace}:{{w}}:n"
    wire.send([("INCRBY", key, 5), ("INCRBY", key, 2)])
    # Redis applied the sent commands before the ones sent behind them.
    assert wire.run([("GET", key)]) == [5, 7, b"7"]
    assert wire.run([]) == []


def test_error_replies_come_back_in_place_and_the_connection_stays_usable(
    redis_client: Any, namespace: str
) -> None:
    wire = RawPipeline(redis_client)
    key = f"{namespace}:{{w}}:s"
    replies = wire.run([("SET", key, "x"), ("INCR", key), ("GET", key)])
    assert replies[0] is True or replies[0] == b"OK"
    assert isinstance(replies[1], ResponseError)
    assert replies[2] == b"x"
    assert wire.run([("GET", key)]) == [b"x"]


def test_a_script_is_loaded_again_after_redis_forgot_it(redis_client: Any, namespace: str) -> None:
    wire = RawPipeline(redis_client)
    key = f"{namespace}:{{w}}:e"
    assert wire.eval_many(INCR, [([key], [1])]) == [1]
    redis_client.script_flush()
    assert wire.eval_many(INCR, [([key], [2]), ([key], [3])]) == [3, 6]
