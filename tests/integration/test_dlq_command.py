"""``lb dlq show`` counts what the job refused, and ``lb dlq redrive`` sends letters back
after a fix: the job then applies them, and a second re-drive sends nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adapters.redis import RedisClient
from tests.integration.streams import job_env, lb

GAME_G1 = '[games."g1"]\nmax_score = 1000000\n'
GAME_G2 = '[games."g2"]\nmax_score = 1000000\n'


def _ok(done: Any) -> str:
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "panicked" not in done.stderr
    return str(done.stdout)


def test_show_counts_every_refusal_and_redrive_applies_letters_once(
    topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAME_G1)
    env = job_env(topic, namespace, tmp_path / "state", games)
    produced = json.loads(
        _ok(
            lb(
                [
                    "produce",
                    "--count",
                    "600",
                    "--players",
                    "40",
                    "--games",
                    "g1",
                    "--unknown-games",
                    "g2",
                    "--bad-ratio",
                    "0.5",
                    "--seed",
                    "11",
                    "--quiet",
                ],
                env,
                timeout=120,
            )
        )
    )
    refused = {k: v for k, v in produced["expected"].items() if k not in ("ok", "duplicate")}
    assert refused.get("UNKNOWN_GAME", 0) > 0

    run = lb(["run", "--until-end"], env, timeout=300)
    _ok(run)
    assert f"lb run: {topic} (4 partitions)" in run.stderr
    assert f"{sum(refused.values())} dead letters" in run.stderr  # the end summary

    shown = json.loads(_ok(lb(["dlq", "show", "--json", "--last", "3"], env, timeout=120)))
    assert shown["byCode"] == refused
    assert shown["total"] == sum(refused.values())
    assert len(shown["last"]) == 3
    assert {"error.code", "error.detail", "source.offset"} <= set(shown["last"][0]["headers"])

    # The fix: g2 is now a game the job serves. Re-drive its letters and run again.
    games.write_text(GAME_G1 + GAME_G2)
    sent = json.loads(_ok(lb(["dlq", "redrive", "--code", "UNKNOWN_GAME"], env, timeout=120)))
    assert sent["codes"] == {"UNKNOWN_GAME": refused["UNKNOWN_GAME"]}
    _ok(lb(["run", "--until-end"], env, timeout=300))
    g2_players = redis_client.zcard(f"{namespace}:{{g2}}:alltime")
    assert 0 < g2_players <= refused["UNKNOWN_GAME"]

    again = json.loads(_ok(lb(["dlq", "redrive", "--code", "UNKNOWN_GAME"], env, timeout=120)))
    assert again["codes"] == {"UNKNOWN_GAME": 0}
    after = json.loads(_ok(lb(["dlq", "show", "--json"], env, timeout=120)))
    assert after["byCode"] == refused  # nothing re-driven came back

    # The audit after the fix: boards equal, and the counters' difference (the replay
    # accepts each original and counts its re-driven copy a duplicate; the live job did
    # the reverse) is explained as expected, not reported as a difference.
    audit = lb(["verify", "--json", "--quiet"], env, timeout=300)
    report = json.loads(_ok(audit))
    assert report["equal"] is True, report
    assert report["differences"] == {}
    assert any(line.startswith("game g2:") for line in report["explained"]), report
    text = _ok(lb(["verify", "--quiet"], env, timeout=300))
    assert text.startswith("equal:") and "expected: game g2:" in text and "None" not in text

    # The text form says where a letter's record sits, in words, and when, in UTC.
    shown_text = _ok(lb(["dlq", "show", "--last", "1"], env, timeout=120))
    assert f"the record at {topic} partition " in shown_text, shown_text
    assert "record time 20" in shown_text and "Z (" in shown_text, shown_text
    assert f"this letter: {topic}.dlq partition " in shown_text, shown_text
