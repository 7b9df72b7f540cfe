"""Rate-limit configuration and counting (config/settings.py, api/limits.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from limits.aio.storage import MemoryStorage

from api.auth.policy import RouteClass
from api.limits import RateLimits, Verdict, rates
from config.settings import Secret, Settings, parse_rate
from domain.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100/second", (100, 1)),
        ("20 per minute", (20, 60)),
        ("20/5 minutes", (20, 300)),
        ("1000/hour", (1000, 3600)),
        ("5/day", (5, 86400)),
        ("0/second", None),
        ("100", None),
        ("100/fortnight", None),
    ],
)
def test_parse_rate(text: str, expected: tuple[int, int] | None) -> None:
    assert parse_rate(text) == expected


def test_the_settings_read_each_class_and_refuse_a_bad_rate(tmp_path: Path) -> None:
    env = {"LB_STATE_DIR": str(tmp_path), "LB_RATE_READS": "50/second", "LB_RATE_WRITES": "off"}
    s = Settings.from_env({**env, "LB_RATE_PUSHES": "10/minute"})
    items = rates(s)
    assert set(items) == {RouteClass.READS, RouteClass.PUSHES}
    assert (items[RouteClass.READS].amount, items[RouteClass.READS].get_expiry()) == (50, 1)
    with pytest.raises(ConfigError, match="LB_RATE_PUSHES must be N/second"):
        Settings.from_env({**env, "LB_RATE_PUSHES": "lots"})


def test_counts_per_class_and_caller_in_clock_aligned_windows() -> None:
    now = [60 * 16_667 + 20.5]  # 20.5 s into a minute
    s = Settings(kafka_bootstrap="x:1", redis_url=Secret("redis://x:1/0"), rate_reads="3/minute")
    limits = RateLimits(MemoryStorage(), rates(s), clock=lambda: now[0])

    async def hits(caller: str, n: int) -> list[Verdict | None]:
        return [await limits.hit(RouteClass.READS, caller) for _ in range(n)]

    first = asyncio.run(hits("a:1.2.3.4", 4))
    assert [v.allowed for v in first if v] == [True, True, True, False]
    assert [v.remaining for v in first if v] == [2, 1, 0, 0]
    assert {v.reset_s for v in first if v} == {40}
    assert first[3] is not None and first[3].headers()[-1] == (b"retry-after", b"40")
    assert [v.allowed for v in asyncio.run(hits("p:ada", 1)) if v] == [True]  # another caller
    assert asyncio.run(limits.hit(RouteClass.WRITES, "a:1.2.3.4")) is None  # not limited
    now[0] += 40  # the next minute: a fresh window
    assert [v.allowed for v in asyncio.run(hits("a:1.2.3.4", 1)) if v] == [True]


class CountingStorage(MemoryStorage):
    """limits' memory storage, counting the round trips a Redis one would make."""

    calls = 0

    async def incr(self, key: str, expiry: float, amount: int = 1) -> int:
        self.calls += 1
        return await super().incr(key, expiry, amount)


def test_two_processes_taking_leases_never_pass_the_limit_and_rarely_ask_redis() -> None:
    now = [60 * 16_667 + 1.0]
    s = Settings(kafka_bootstrap="x:1", redis_url=Secret("redis://x:1/0"), rate_reads="800/minute")
    shared = CountingStorage()
    one = RateLimits(shared, rates(s), clock=lambda: now[0])
    two = RateLimits(shared, rates(s), clock=lambda: now[0])

    async def alternate(n: int) -> list[bool]:
        out = []
        for i in range(n):
            verdict = await (one, two)[i % 2].hit(RouteClass.READS, "p:ada")
            assert verdict is not None
            out.append(verdict.allowed)
        return out

    allowed = asyncio.run(alternate(1000))
    assert 800 - 800 // 8 <= sum(allowed) <= 800
    assert all(allowed[:700]) and not any(allowed[-150:])
    assert shared.calls < 100  # leases: far fewer round trips than requests
    calls = shared.calls
    asyncio.run(alternate(50))  # the spent window is refused without asking again
    assert shared.calls == calls
