"""A restarted job resumes from what Redis still holds, not only from its recovery store."""

from __future__ import annotations

from pathlib import Path

from adapters.redis import RedisClient
from tests.integration.streams import lb, oracle, read_boards, read_stats, stream_and_env


def test_a_flushed_namespace_or_a_new_one_is_replayed_by_the_next_run(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=31, count=3000)
    expected, _ = oracle(stream.records)
    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_boards(redis_client, namespace) == expected
    stats = read_stats(redis_client, namespace)

    # The projection is lost while the job is stopped; its recovery store says
    # "everything was read". The next run notices and reads the topic again.
    for key in redis_client.scan_iter(match=f"{namespace}:*"):
        redis_client.delete(key)
    again = lb(["run", "--until-end"], env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "than the recovery snapshot" in again.stderr
    assert read_boards(redis_client, namespace) == expected
    assert read_stats(redis_client, namespace) == stats

    # Same state directory, another namespace (or another Redis): replayed too.
    other = f"{namespace}b"
    try:
        moved = lb(["run", "--until-end"], {**env, "LB_NAMESPACE": other}, timeout=300)
        assert moved.returncode == 0, moved.stderr[-3000:]
        assert read_boards(redis_client, other) == expected
        assert read_stats(redis_client, other) == stats
    finally:
        for key in redis_client.scan_iter(match=f"{other}:*"):
            redis_client.delete(key)

    # A third run over an intact projection re-reads nothing and changes nothing.
    quiet = lb(["run", "--until-end"], env, timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "than the recovery snapshot" not in quiet.stderr
    assert read_stats(redis_client, namespace) == stats
