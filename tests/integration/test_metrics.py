"""The running job's metrics, read from its real endpoints, against what was produced.

A job tails the test's topic (1 or 2 processes) while a generated stream with
every kind of bad record and duplicates arrives in two halves; every metric is
read from each process's ``/metrics`` while it runs and checked against the
stream: lag falls to 0, the outcome counters obey the conservation law and
equal ``meta:stats`` game by game, dead letters by code equal what was sent
(and what the dead-letter topic holds). The same run checks ``/livez``,
``/readyz``, ``lb status --json``, and ``LB_LOG_FORMAT=json`` lines.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from adapters.kafka import header_map
from adapters.redis import RedisClient, text
from telemetry import derive, server
from tests.integration.streams import (
    GAMES,
    GAMES_TOML,
    generate,
    job_env,
    lb,
    oracle,
    produce,
    read_dead_letters,
)
from tests.integration.watching import http_get, start_job, until


def _scrape(entries: list[dict[str, Any]]) -> tuple[derive.Samples, list[str]]:
    """All processes' samples merged (counters added), and their raw texts."""
    merged: derive.Samples = {}
    texts = []
    for entry in entries:
        _, text = http_get(entry["metrics"])
        texts.append(text)
        for name, series in derive.parse_exposition(text).items():
            into = merged.setdefault(name, {})
            for labels, value in series.items():
                into[labels] = into.get(labels, 0.0) + value
    return merged, texts


def _stats_by_game(client: RedisClient, namespace: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for key in client.scan_iter(match=f"{namespace}:*:meta:stats"):
        game = key.decode().split("{", 1)[1].split("}", 1)[0].split("/", 1)[0]
        into = out.setdefault(game, {})
        for name, value in client.hgetall(key).items():
            into[text(name)] = into.get(text(name), 0) + int(value)
    return out


@pytest.mark.parametrize("processes", [1, 2])
def test_every_metric_of_a_running_job_agrees_with_the_stream(
    processes: int,
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
    tmp_path: Path,
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    state = tmp_path / "state"
    env = job_env(topic, namespace, state, games)
    env.update(LB_LOG_FORMAT="json", LB_PROGRESS_S="1", LB_METRICS_PORT="0")
    stream = generate(seed=13 + processes, count=4000)
    half = len(stream.records) // 2

    log = tmp_path / "job.log"
    proc = start_job(["run", "--processes", str(processes)], env, log)
    try:
        entries = until(
            f"{processes} registered job processes",
            lambda: (
                (found := server.registered(state, "job")) and len(found) == processes and found
            ),
            log,
            proc,
        )
        assert sorted(e["process"] for e in entries) == [str(i) for i in range(processes)]
        assert all(e["topic"] == topic and e["kind"] == "live" for e in entries)

        # First half: the job catches up, then the second half arrives while it runs.
        produce(kafka_bootstrap, topic, stream.records[:half])
        until(
            "the first half counted",
            lambda: derive.total(_scrape(entries)[0], "lb_records_total") >= half,
            log,
            proc,
        )
        produce(kafka_bootstrap, topic, stream.records[half:])

        def caught_up() -> derive.Samples | None:
            samples, _ = _scrape(entries)
            lag = samples.get("lb_consumer_lag_records", {})
            done = derive.total(samples, "lb_records_total") == len(stream.records)
            scored = [v for labels, v in lag.items() if dict(labels)["topic"] == topic]
            if done and len(scored) == 4 and all(v == 0 for v in lag.values()):
                return samples
            return None

        samples = until("lag 0 and every record counted", caught_up, log, proc)
        _, texts = _scrape(entries)

        # Lag: every partition of the topic and of the profiles topic lb run made
        # beside it, each owned by one process, all at 0.
        lag = samples["lb_consumer_lag_records"]
        by_topic: dict[str, set[str]] = {}
        for labels in lag:
            by_topic.setdefault(dict(labels)["topic"], set()).add(dict(labels)["partition"])
        assert by_topic == {name: {"0", "1", "2", "3"} for name in (topic, f"{topic}.profiles")}
        assert set(samples["lb_consumer_lag_seconds"].values()) == {0.0}

        # Conservation and agreement with meta:stats, game by game.
        _, counts = oracle(stream.records)
        outcomes = derive.by_label(samples, "lb_records_total", "outcome")
        assert derive.conservation({k: int(v) for k, v in outcomes.items()}) == len(stream.records)
        stats = _stats_by_game(redis_client, namespace)
        for game, by_name in stats.items():
            for outcome in ("applied", "noop", "duplicate"):
                assert derive.total(samples, "lb_records_total", game=game, outcome=outcome) == (
                    by_name.get(outcome, 0)
                ), (game, outcome)
        assert outcomes["duplicate"] == counts["duplicate"]
        assert outcomes["applied"] + outcomes["noop"] == counts["accepted"]
        # Tournament refusals: counted besides the outcomes, like meta:stats and the oracle.
        for reason in ("tournament_full", "attempts_used_up"):
            refused = derive.total(
                samples, "lb_tournament_refusals_total", game="gtour", reason=reason
            )
            assert refused == stats["gtour"].get(reason, 0) == counts[reason] > 0, reason

        # Dead letters by code: what was sent, what the dead-letter topic holds.
        sent = Counter(r.expected for r in stream.records if r.expected not in ("ok", "duplicate"))
        letters = Counter(
            header_map(m.headers())["error.code"]
            for m in read_dead_letters(kafka_bootstrap, f"{topic}.dlq")
        )
        by_code = derive.by_label(samples, "lb_dead_letters_total", "code")
        assert {k: int(v) for k, v in by_code.items()} == dict(sent) == dict(letters)
        assert len(sent) == 8  # every code is exercised
        assert derive.total(
            samples, "lb_records_total", game=derive.NO_GAME, outcome="dead_letter"
        ) == sum(sent.values())

        # Batches and stages: every record went through validation once.
        assert derive.total(samples, "lb_batch_records_sum") == len(stream.records)
        assert derive.total(samples, "lb_batch_records_count") >= 1
        for stage in ("validate", "plan", "redis_read", "redis_write"):
            assert derive.total(samples, "lb_batch_seconds_count", stage=stage) >= 1, stage
        # Freshness: one observation per record that reached the boards.
        accepted = outcomes["applied"] + outcomes["noop"] + outcomes["duplicate"]
        assert derive.total(samples, "lb_freshness_seconds_count") == accepted
        assert derive.total(samples, "lb_freshness_seconds_bucket", le="+Inf") == accepted
        # No outage: no retry, no Kafka error (the family is declared all the same).
        assert derive.total(samples, "lb_redis_retries_total") == 0
        assert all("# TYPE lb_kafka_errors_total counter" in text for text in texts)
        assert derive.total(samples, "lb_kafka_errors_total") == 0
        # The caches hold at most the players seen (150 per game, per board group).
        assert 0 < derive.total(samples, "lb_planner_cache_players") <= 150 * len(GAMES)
        assert (
            len(samples["lb_snapshot_age_seconds"]) == 1
            and min(samples["lb_snapshot_age_seconds"].values()) >= 0
        )
        assert derive.total(samples, "lb_live") == processes
        assert derive.total(samples, "lb_ready") == processes
        for entry in entries:
            base = entry["metrics"].removesuffix("/metrics")
            for path in ("/livez", "/readyz"):
                code, body = http_get(base + path)
                assert code == 200
                assert json.loads(body) == {
                    "ok": True,
                    "reasons": [],
                    "process": int(entry["process"]),
                    "processes": processes,
                }

        # lb status --json: each process, its metrics address, lag and rates.
        status = lb(["status", "--json", "--interval", "0.5"], env, timeout=60)
        doc = json.loads(status.stdout)
        jobs = sorted(doc["jobs"], key=lambda j: j["process"])
        assert {j["metrics"] for j in jobs} == {e["metrics"] for e in entries}
        assert all(j["up"] and j["ready"] and j["lag_total"] == 0 for j in jobs)
        lagged = {name for j in jobs for name in j["lag"]}
        assert lagged == {f"{t}/{p}" for t in (topic, f"{topic}.profiles") for p in range(4)}
        assert all("records_per_s" in j["rates"] for j in jobs)
        assert sum(sum(j["records"].values()) for j in jobs) == len(stream.records)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
    assert server.registered(state, "job") == []  # each process removed its registration

    # LB_LOG_FORMAT=json: the job's lines are JSON objects with level and step;
    # progress objects carry the counters, partition objects their partition.
    # (Bytewax's Rust runtime prints a few lines of its own, outside Python's
    # logging, e.g. "worker 1:\terror connecting to worker 0 ...; retrying".)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    objects = [json.loads(line) for line in lines if not line.startswith("worker ")]
    assert len(objects) >= len(lines) - 2 * processes
    assert all({"level", "step", "msg", "ts"} <= set(o) for o in objects)
    progress = [o for o in objects if o["step"] == "progress"]
    assert progress and all("counters" in o for o in progress)
    last = [o for o in progress if "stopped" in o["msg"]]
    assert len(last) == processes
    assert sum(
        o["counters"].get("applied", 0)
        + o["counters"].get("noop", 0)
        + o["counters"].get("duplicate", 0)
        + o["counters"]["dead_letter"]
        for o in last
    ) == len(stream.records)
    parts = [o for o in objects if "partition" in o]
    assert {o["partition"] for o in parts} == {0, 1, 2, 3}
    assert all("lag_records" in o["counters"] for o in parts)
