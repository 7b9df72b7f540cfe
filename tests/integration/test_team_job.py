"""Team boards through the real job: signed records in Kafka, ``lb run`` and ``lb teams run``.

Score events and membership records are produced to real topics in two
rounds, and the two jobs run in a different order each round, so the team
boards see both interleavings. An independent oracle (plain dictionaries:
the best or summed score per player and window, the last valid membership
record per player) must equal what ``lb teams top``/``members`` answer;
``lb teams verify`` must find nothing; bad membership records are in the
membership dead-letter topic with their codes; re-reading the whole
membership topic changes nothing.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Producer

from adapters.kafka import read_topic
from adapters.redis import RedisClient, text_of
from domain.events import EventKind
from domain.signing import parse_keyring, signed_event
from domain.teams import Membership, TeamAggregate, TeamKeys, team_boards
from schemas.codec import ScoreEventCodec
from schemas.membership import MembershipCodec, sign_membership
from tests.integration.streams import KEYS, job_env, lb

_KEEP = "daily_retention_seconds = 3153600000\n"
GAMES_TOML = (
    f'[games."squad"]\nteams = "sum"\nmax_score = 1000\nwindows = ["alltime", "daily"]\n{_KEEP}'
    f'[games."duo"]\nteams = "best"\noperator = "incr"\nmax_score = 1000\n'
    f'windows = ["alltime", "daily"]\n{_KEEP}'
)
OPS = {"squad": "best", "duo": "incr"}
T0 = int(datetime(2026, 11, 2, 8, 0, tzinfo=UTC).timestamp() * 1000)
DAY = "daily:2026-11-02"
PLAYERS = [f"p{i:02d}" for i in range(24)]
TEAMS = ["red", "blue", "green", "gold"]


def _scores(rng: random.Random, n: int, start: int) -> list[tuple[str, str, int, int, bool]]:
    """(game, player, score, ts, retract) in log order."""
    out = []
    for i in range(n):
        retract = rng.random() < 0.03
        ts = T0 + (start + i) * 1000
        out.append((rng.choice(list(OPS)), rng.choice(PLAYERS), rng.randrange(0, 200), ts, retract))
    return out


def _produce_scores(
    bootstrap: str, topic: str, events: list[tuple[str, str, int, int, bool]]
) -> None:
    keyring, codec = parse_keyring(KEYS), ScoreEventCodec.from_registry()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n, (game, player, score, ts, retract) in enumerate(events):
        kind = EventKind.RETRACT if retract else EventKind.SCORE
        event = signed_event(
            keyring,
            "k1",
            event_id=f"{topic}-{ts}-{n}",
            game_id=game,
            player_id=player,
            score=score,
            ts_ms=ts,
            kind=kind,
        )
        producer.produce(topic, key=player.encode(), value=codec.encode(event), timestamp=ts)
    assert producer.flush(60) == 0


def _produce_members(
    bootstrap: str, topic: str, rng: random.Random, n: int
) -> tuple[list[tuple[str, str | None]], list[str]]:
    """Valid (player, team) records in log order and the dead-letter codes expected."""
    keyring, codec = parse_keyring(KEYS), MembershipCodec()
    wrong = parse_keyring("k1:" + "33" * 32)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    valid: list[tuple[str, str | None]] = []
    codes: list[str] = []
    for _ in range(n):
        player, roll = rng.choice(PLAYERS), rng.random()
        team = None if roll < 0.15 else rng.choice(TEAMS)
        value: bytes | None = codec.encode(sign_membership(keyring, "k1", player, team, T0))
        if roll < 0.05:
            value = None  # a tombstone: leaves
        elif roll > 0.96:
            bad = rng.choice(["SIGNATURE", "SCHEMA", "DECODE", "UNKNOWN_KEY", "BADTEAM"])
            if bad == "SIGNATURE":
                value = codec.encode(sign_membership(wrong, "k1", player, "red", T0))
            elif bad == "SCHEMA":
                value = codec.encode(sign_membership(keyring, "k1", "someone-else", "red", T0))
            elif bad == "DECODE":
                value = b"\x00\x00\x00\x00\x28garbage"
            elif bad == "UNKNOWN_KEY":
                record = sign_membership(keyring, "k1", player, "red", T0)
                value = codec.encode(Membership(player, "red", T0, "k7", record.sig))
            else:
                value = codec.encode(sign_membership(keyring, "k1", player, "no:colons", T0))
            codes.append("SCHEMA" if bad == "BADTEAM" else bad)
            producer.produce(topic, key=player.encode(), value=value)
            continue
        valid.append((player, None if value is None else team))
        producer.produce(topic, key=player.encode(), value=value)
    assert producer.flush(60) == 0
    return valid, codes


def _oracle_scores(
    events: list[tuple[str, str, int, int, bool]], game: str
) -> dict[str, dict[str, int]]:
    boards: dict[str, dict[str, int]] = {"alltime": {}, DAY: {}}
    for g, player, score, _, retract in events:
        if g != game:
            continue
        for board in boards.values():
            if retract:
                board.pop(player, None)
            elif OPS[game] == "best":
                board[player] = max(board.get(player, score), score)
            else:
                board[player] = min(1000, board.get(player, 0) + score)  # saturates
    return boards


def test_team_boards_through_the_jobs_equal_an_independent_oracle(
    kafka_bootstrap: str,
    topic: str,
    teams_topic: str,
    namespace: str,
    redis_client: RedisClient,
    tmp_path: Path,
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    env = {**job_env(topic, namespace, tmp_path / "state", games), "LB_TEAMS_TOPIC": teams_topic}
    rng = random.Random(26)
    first = lb(["teams", "run", "--until-end"], env, timeout=120)  # creates the topics
    assert first.returncode == 0, first.stderr[-2000:]

    events = _scores(rng, 300, 0)
    _produce_scores(kafka_bootstrap, topic, events)
    members, codes = _produce_members(kafka_bootstrap, teams_topic, rng, 60)
    for args in (["run", "--until-end"], ["teams", "run", "--until-end"]):
        done = lb(args, env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    more = _scores(rng, 300, 300)
    _produce_scores(kafka_bootstrap, topic, more)
    later, more_codes = _produce_members(kafka_bootstrap, teams_topic, rng, 60)
    for args in (["teams", "run", "--until-end"], ["run", "--until-end"]):
        done = lb(args, env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]

    final: dict[str, str | None] = {}
    for player, team in members + later:
        final[player] = team
    for game, kind in (("squad", TeamAggregate.SUM), ("duo", TeamAggregate.BEST)):
        expected, expected_members = team_boards(kind, final, _oracle_scores(events + more, game))
        for window in ("alltime", DAY):
            top = lb(["teams", "top", game, "--window", window, "--limit", "100", "--json"], env)
            assert top.returncode == 0, top.stderr
            got = {e["teamId"]: e["score"] for e in json.loads(top.stdout)["entries"]}
            assert got == expected.get(window, {}), (game, window)
            for team in TEAMS:
                page = lb(
                    [
                        "teams",
                        "members",
                        game,
                        team,
                        "--window",
                        window,
                        "--json",
                        "--limit",
                        "100",
                    ],
                    env,
                )
                entries = json.loads(page.stdout)["entries"]
                want = expected_members.get((window, team), {})
                assert {e["playerId"]: e["score"] for e in entries} == want, (game, team)
    verify = lb(["teams", "verify", "--json"], env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["equal"] is True
    audit = lb(["verify", "--json", "--quiet"], env, timeout=300)  # boards and team boards
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
    assert json.loads(audit.stdout)["teams"]["equal"] is True

    letters = read_topic({"bootstrap.servers": kafka_bootstrap}, f"{teams_topic}.dlq")
    got_codes = sorted(text_of(dict(m.headers() or [])["error.code"]) for m in letters)
    assert got_codes == sorted(codes + more_codes)

    # Every record again from the start (as after losing the watermarks): nothing changes.
    before = {
        k: redis_client.zrange(k, 0, -1, withscores=True)
        for k in _team_keys(redis_client, namespace)
    }
    for game in OPS:
        redis_client.delete(TeamKeys(namespace, game).watermarks)
    again = lb(["teams", "run", "--until-end"], env, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    after = {
        k: redis_client.zrange(k, 0, -1, withscores=True)
        for k in _team_keys(redis_client, namespace)
    }
    assert after == before


def _team_keys(client: RedisClient, namespace: str) -> list[bytes]:
    return sorted(
        key
        for key in client.scan_iter(match=f"{namespace}:*", count=1000)
        if b":team:" in key
        or (
            b":teams:" in key
            and b":teams:of" not in key
            and key.count(b":") > 2
            and client.type(key) == b"zset"
        )
    )
