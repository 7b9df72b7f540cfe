"""``bench.rebuild``'s section shows each run's command and what Redis spent on it."""

from __future__ import annotations

from bench.common import redis_spent
from bench.rebuild import markdown


def test_redis_time_is_the_difference_of_two_readings_largest_commands_first() -> None:
    before = (10.0, {"zadd": 1.0, "hmget": 2.0, "ping": 0.5})
    after = (25.5, {"zadd": 9.0, "hmget": 2.5, "ping": 0.5, "evalsha": 12.0})
    spent = redis_spent(before, after)
    assert spent["main_thread_s"] == 15.5
    assert list(spent["commands_s"].items()) == [("evalsha", 12.0), ("zadd", 8.0), ("hmget", 0.5)]


def test_the_section_has_a_row_per_run_with_its_command_and_redis_time() -> None:
    run = {
        "mode": "replay",
        "processes": 2,
        "seconds": 30.5,
        "players_per_s": 3279,
        "peak_rss_bytes": 200 * 2**20,
        "redis": {"main_thread_s": 12.25, "commands_s": {"evalsha": 11.0, "zadd": 7.5}},
        "verified": True,
    }
    memory = {
        "per_player_per_board": 100.0,
        "per_player": {"boards": 300.0, "dedupe (meta:seen)": 99.0, "other metadata": 0.0},
        "used_memory_growth_per_player": 430.0,
    }
    summary = {
        "command": "python -m bench.rebuild",
        "machine": {
            "date": "2026-11-25 20:00 UTC",
            "nproc": 2,
            "cpu_model": "x",
            "loadavg_at_start": [0.0, 0.0, 0.0],
            "python": "3.11",
            "bytewax": "0.21.1",
            "commit": "abc",
        },
        "sizes": [{"players": 100_000, "runs": [run], "memory": memory}],
        "scaling": [],
        "process_ratio": {},
    }
    text = markdown(summary)
    assert (
        "| 100,000 | `lb rebuild` | 2 | 30.5 | 3,279 | 200 | 12.25 | evalsha 11, zadd 7.5 | ok |"
        in text
    )
