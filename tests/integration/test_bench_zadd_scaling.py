"""``bench.zadd_scaling`` against the real Redis: it measures both sets and leaves no key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.redis import RedisClient
from bench import zadd_scaling


def test_a_small_run_reports_every_round_and_deletes_its_keys(
    services: dict[str, Any], redis_client: RedisClient, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = ["--small", "2000", "--large", "20000", "--insert", "1000", "--rounds", "2"]
    assert zadd_scaling.main(argv) == 0
    summary = json.loads(capfd.readouterr().out)
    assert len(summary["rounds"]) == 2
    for r in summary["rounds"]:
        assert r["small"] > 0 and r["large"] > 0
        assert r["ratio"] == pytest.approx(r["large"] / r["small"], rel=0.02)
    assert summary["median_ratio"] > 0
    assert not list(redis_client.scan_iter(match="bench-zadd-*", count=1000))
    with pytest.raises(SystemExit):
        zadd_scaling.main(["--small", "10", "--large", "5"])
