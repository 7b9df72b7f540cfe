"""Profiles end to end: the job projects the compacted topic, readers hydrate pages.

Real Kafka and Redis (standalone and the local Redis Cluster): signed records
set a profile, a tombstone or a refused record erases it, refused records are
dead-lettered with their code, a replay gives the same buckets, and a page's
profiles cost one batched lookup (counted with Redis's own command stats).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.cluster import RedisCluster

from adapters.redis import RedisClient, text
from config.settings import Settings
from domain.games import GameCatalog, GameConfig
from domain.keys import entry_metadata_key
from domain.profiles import (
    BUCKETS,
    ProfileKeys,
    all_buckets,
    bucket_of,
    sign_profile,
    stored_bytes,
)
from domain.signing import parse_keyring
from producer.profiles import (
    ensure_profiles_topic,
    produce_erasure,
    produce_profile,
    profile_producer,
)
from readers.async_boards import AsyncBoardReader
from readers.boards import BoardReader
from readers.profiles import ProfileReader
from schemas.profile_codec import ProfileCodec
from tests.integration.streams import KEYS, lb, read_dead_letters, stream_and_env

pytestmark = pytest.mark.integration

CODEC = ProfileCodec.from_registry()
KEYRING = parse_keyring(KEYS)
STRANGER = parse_keyring("k1:" + "77" * 32)
PLAYERS = [f"p{i:04d}" for i in range(150)]


def _named(player: str, version: int = 1) -> dict[str, Any]:
    return {
        "displayName": f"Name {player} v{version}",
        "avatarUrl": f"https://img.example/{player}.png",
        "country": "FR",
        "updatedAt": 1_700_000_000_000 + version,
    }


def _produce_profiles(env: dict[str, str]) -> dict[str, dict[str, Any] | None]:
    """Profiles of most players, then tombstones and refused records; what Redis must hold."""
    settings = Settings.from_env(env)
    ensure_profiles_topic(settings)
    expected: dict[str, dict[str, Any] | None] = {}
    with profile_producer(settings) as producer:
        for version in (1, 2):  # every player's second record replaces its first
            for player in PLAYERS[:120]:
                doc = _named(player, version)
                record = sign_profile(
                    KEYRING,
                    "k1",
                    player_id=player,
                    display_name=doc["displayName"],
                    avatar_url=doc["avatarUrl"],
                    country=doc["country"],
                    updated_at_ms=doc["updatedAt"],
                )
                produce_profile(producer, CODEC, record)
                expected[player] = doc
        for player in PLAYERS[100:105]:  # erased by a tombstone
            produce_erasure(producer, player)
            expected[player] = None
        forged = sign_profile(
            STRANGER, "k1", player_id=PLAYERS[105], display_name="Forged", updated_at_ms=1
        )
        produce_profile(producer, CODEC, forged)  # SIGNATURE: erases the older one
        expected[PLAYERS[105]] = None
        producer.produce_record(PLAYERS[106].encode(), b"\x00\x00\x00\x00\x64\x02")  # DECODE
        expected[PLAYERS[106]] = None
        producer.flush(30)
    return expected


def _buckets(client: RedisClient, namespace: str) -> dict[str, dict[str, str]]:
    """Every bucket's profiles, as text."""
    out: dict[str, dict[str, str]] = {}
    for keys in all_buckets(namespace):
        held = client.hgetall(keys.profiles)
        out[str(keys.bucket)] = {text(k): text(v) for k, v in held.items()}
    return out


def _run_job(tmp_path: Path, env: dict[str, str], *flags: str) -> None:
    done = lb(["run", "--until-end", *flags], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _check_projection(
    client: RedisClient, namespace: str, expected: dict[str, dict[str, Any] | None]
) -> None:
    found = ProfileReader(client, namespace).lookup(PLAYERS)
    assert found == {p: doc for p, doc in expected.items() if doc is not None}


def test_job_projects_profiles_exactly_once_and_pages_carry_them(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
    tmp_path: Path,
) -> None:
    _stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=7, count=400)
    expected = _produce_profiles(env)
    _run_job(tmp_path, env)
    _check_projection(redis_client, namespace, expected)

    letters = read_dead_letters(kafka_bootstrap, f"{topic}.profiles.dlq")
    codes = sorted(dict(letter.headers())["error.code"].decode() for letter in letters)
    assert codes == ["DECODE", "SIGNATURE"]

    # Replaying the whole topic again (no recovery) changes nothing: the
    # watermarks skip every record; a replay into a fresh namespace is equal.
    before = _buckets(redis_client, namespace)
    _run_job(tmp_path, env, "--no-recovery")
    assert _buckets(redis_client, namespace) == before
    fresh = f"{namespace}r"
    try:
        _run_job(tmp_path, {**env, "LB_NAMESPACE": fresh, "LB_STATE_DIR": str(tmp_path / "s2")})
        assert _buckets(redis_client, fresh) == before
    finally:
        for key in redis_client.scan_iter(match=f"{fresh}:*"):
            redis_client.delete(key)

    # The CLI: a page with profiles, a player without one answers null.
    page = lb(["top", "gbest", "--limit", "100", "--profiles", "--json"], env)
    assert page.returncode == 0, page.stderr
    entries = json.loads(page.stdout)["entries"]
    assert entries
    for entry in entries:
        assert entry["profile"] == expected.get(entry["playerId"])
    bare = json.loads(lb(["top", "gbest", "--json"], env).stdout)["entries"]
    assert all("profile" not in entry for entry in bare)

    # lb profiles set / show / delete, waiting for the running job's projection.
    shown = lb(["profiles", "show", PLAYERS[0], "--json"], env)
    assert json.loads(shown.stdout)["profile"] == expected[PLAYERS[0]]
    assert lb(["profiles", "show", PLAYERS[140]], env).returncode == 1


def test_cli_set_and_delete_reach_redis_through_the_job(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
    tmp_path: Path,
    live_job: Any,
) -> None:
    from tests.integration.streams import GAMES_TOML, job_env

    games = tmp_path / "g.toml"
    games.write_text(GAMES_TOML)
    env = job_env(topic, namespace, tmp_path / "cli-state", games)
    done = lb(
        [
            "profiles",
            "set",
            "p1",
            "--name",
            "Ada | L.",
            "--country",
            "GB",
            "--wait",
            "60",
            "--json",
        ],
        env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["profile"]["displayName"] == "Ada | L."
    assert ProfileReader(redis_client, namespace).profile("p1") is not None
    gone = lb(["profiles", "delete", "p1", "--wait", "60"], env, timeout=120)
    assert gone.returncode == 0, gone.stderr
    assert ProfileReader(redis_client, namespace).profile("p1") is None
    wrong = lb(["profiles", "set", "p1", "--name", "x", "--country", "gb"], env)
    assert wrong.returncode == 2 and "country" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def _calls(client: redis.Redis, command: str = "hmget") -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def _hmget_calls(client: redis.Redis) -> int:
    return _calls(client)


def _seed(client: RedisClient, namespace: str, players: list[str]) -> None:
    for player in players:
        if player.endswith("7"):
            continue  # some players have no profile
        client.hset(
            ProfileKeys(namespace, bucket_of(player)).profiles,
            player,
            stored_bytes(_named(player)),
        )


def test_a_page_costs_one_batched_lookup_on_standalone_redis(
    redis_client: redis.Redis, namespace: str
) -> None:
    players = [f"q{i:04d}" for i in range(100)]
    _seed(redis_client, namespace, players)
    reader = ProfileReader(redis_client, namespace)
    page: Any = {
        "window": "alltime",
        "entries": [
            {"rank": i + 1, "playerId": p, "score": 100 - i} for i, p in enumerate(players)
        ],
        "nextCursor": None,
    }
    before = _hmget_calls(redis_client), _calls(redis_client, "evalsha")
    reader.hydrate(page)
    calls = _hmget_calls(redis_client) - before[0]
    # One command (a read-only script), in which one HMGET per bucket the page
    # touches (at most BUCKETS), never one per entry.
    assert _calls(redis_client, "evalsha") - before[1] == 1
    assert calls == len({bucket_of(p) for p in players}) <= BUCKETS < len(players)
    for entry in page["entries"]:
        wanted = None if entry["playerId"].endswith("7") else _named(entry["playerId"])
        assert entry["profile"] == wanted


def test_a_page_costs_one_lookup_per_node_on_a_cluster(
    cluster_client: RedisCluster, namespace: str
) -> None:
    players = [f"c{i:04d}" for i in range(100)]
    _seed(cluster_client, namespace, players)
    primaries = cluster_client.get_primaries()
    conns = [cluster_client.get_redis_connection(node) for node in primaries]
    before = [_hmget_calls(conn) for conn in conns]
    page: Any = {
        "window": "alltime",
        "above": [],
        "below": [],
        "player": {"rank": 1, "playerId": players[0], "score": 1},
    }
    page["below"] = [{"rank": i + 2, "playerId": p, "score": 0} for i, p in enumerate(players[1:])]
    ProfileReader(cluster_client, namespace).hydrate(page)
    after = [_hmget_calls(conn) for conn in conns]
    per_node = {
        node.name: sum(
            1
            for b in {bucket_of(p) for p in players}
            if cluster_client.get_node_from_key(ProfileKeys(namespace, b).profiles).name
            == node.name
        )
        for node in primaries
    }
    assert [a - b for a, b in zip(after, before, strict=True)] == [
        per_node[node.name] for node in primaries
    ]
    assert page["player"]["profile"] == _named(players[0])
    assert page["below"][6]["profile"] is None  # c0007: no profile, still answered


#: Ids of every length and some non-ASCII bytes: the script's CRC-32 must agree with zlib's.
PAGE_PLAYERS = ["é" * (i % 3) + "x" * (i % 11) + f"h{i}" for i in range(60)]


def _seed_board(client: RedisClient, namespace: str) -> BoardReader:
    """An all-time board of PAGE_PLAYERS (some tied, some with metadata, most with a profile)."""
    reader = BoardReader(client, GameCatalog({}, GameConfig()), namespace)
    board = reader.board("g1", "alltime", 0)
    for i, player in enumerate(PAGE_PLAYERS):
        key = board.keys[0]
        client.zadd(key, {player: (i // 3) * board.codec.slots + i % board.codec.slots})
        if i % 4 == 0:
            client.hset(entry_metadata_key(key), player, f"car {i}")
    _seed(client, namespace, PAGE_PLAYERS)
    return reader


def _pages(reader: BoardReader, profiles: bool) -> list[Any]:
    """Top pages and around windows over the whole board, edges and absent players included."""
    out: list[Any] = [
        reader.top("g1", "alltime", limit, offset, now_ms=0, profiles=profiles)
        for limit, offset in [(10, 0), (100, 0), (7, 55), (5, 80)]
    ]
    for player in [*PAGE_PLAYERS[::6], PAGE_PLAYERS[-1], "nobody"]:
        for k, ranks in [(0, "unique"), (5, "unique"), (5, "competition"), (100, "unique")]:
            args = ("g1", player, "alltime", k)
            out.append(reader.around(*args, now_ms=0, ranks=ranks, profiles=profiles))
    return out


def test_a_hydrated_page_is_one_script_call_on_standalone_redis(
    redis_client: redis.Redis, namespace: str
) -> None:
    reader = _seed_board(redis_client, namespace)
    looked_up: list[Any] = [
        ProfileReader(redis_client, namespace).hydrate(p) for p in _pages(reader, False)
    ]
    assert _pages(reader, True) == looked_up  # the same answers as a separate lookup
    assert any(line.get("metadata") for line in looked_up[0]["entries"])
    lines = looked_up[1]["entries"]
    assert len(lines) == len(PAGE_PLAYERS)
    for line in lines:  # players whose id ends in 7 have no profile and are still answered
        assert (line["profile"] is None) == line["playerId"].endswith("7")
    before = [_calls(redis_client, c) for c in ("evalsha", "hmget", "zrevrank")]
    answer = reader.around("g1", PAGE_PLAYERS[20], "alltime", 5, now_ms=0, profiles=True)
    after = [_calls(redis_client, c) for c in ("evalsha", "hmget", "zrevrank")]
    # One command, whose script reads the window, its metadata and one HMGET per bucket.
    buckets = {bucket_of(line["playerId"]) for line in [*answer["above"], *answer["below"]]}
    buckets.add(bucket_of(PAGE_PLAYERS[20]))
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1 + len(buckets), 1]


def test_the_asyncio_reader_hydrates_the_same(
    redis_client: redis.Redis, redis_url: str, namespace: str
) -> None:
    reader = _seed_board(redis_client, namespace)
    lookup = ProfileReader(redis_client, namespace)
    players = [PAGE_PLAYERS[0], PAGE_PLAYERS[31], "nobody"]

    async def hydrated() -> list[Any]:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            fast = AsyncBoardReader(reader, client)
            out: list[Any] = [
                await fast.around("g1", p, "alltime", 5, now_ms=0, profiles=True) for p in players
            ]
            out.append(await fast.top("g1", "alltime", 10, 3, now_ms=0, profiles=True))
            return out
        finally:
            await client.aclose()

    expected: list[Any] = [
        lookup.hydrate(reader.around("g1", p, "alltime", 5, now_ms=0)) for p in players
    ]
    expected.append(lookup.hydrate(reader.top("g1", "alltime", 10, 3, now_ms=0)))
    assert asyncio.run(hydrated()) == expected


def test_a_hydrated_page_on_a_cluster_answers_the_same(
    cluster_client: RedisCluster, namespace: str
) -> None:
    reader = _seed_board(cluster_client, namespace)
    looked_up = [ProfileReader(cluster_client, namespace).hydrate(p) for p in _pages(reader, False)]
    assert _pages(reader, True) == looked_up


def test_job_projects_into_the_redis_cluster(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    cluster_client: RedisCluster,
    cluster_services: list[str],
    tmp_path: Path,
) -> None:
    _stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=3, count=100)
    env.update(LB_REDIS_URL=cluster_services[0], LB_REDIS_CLUSTER="1")
    expected = _produce_profiles(env)
    _run_job(tmp_path, env)
    _check_projection(cluster_client, namespace, expected)
    page = lb(["top", "gbest", "--limit", "50", "--profiles", "--json"], env)
    assert page.returncode == 0, page.stderr
    for entry in json.loads(page.stdout)["entries"]:
        assert entry["profile"] == expected.get(entry["playerId"])


def _http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _signed_body(
    player: str,
    name: str,
    keyring: Any = KEYRING,
    *,
    avatar: str | None = None,
    updated_at: int = 1_800_000_000_000,
) -> dict[str, Any]:
    record = sign_profile(
        keyring,
        "k1",
        player_id=player,
        display_name=name,
        avatar_url=avatar or f"https://img.example/{player}.png",
        updated_at_ms=updated_at,
    )
    return {
        "displayName": record.display_name,
        "avatarUrl": record.avatar_url,
        "country": None,
        "updatedAt": record.updated_at_ms,
        "keyId": record.key_id,
        "sig": record.sig.hex(),
    }


def test_signed_put_reaches_every_hydrated_http_read(
    live_job: Any,
    live_api: str,
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
) -> None:
    from tests.integration.live_events import GAME, best
    from tests.integration.streams import produce
    from tests.poll import poll

    produce(kafka_bootstrap, topic, [best("ada", 300), best("bob", 200)])
    top = f"{live_api}/v1/leaderboards/{GAME}/top?limit=5"
    poll("the job applies the scores", lambda: len(_http("GET", top)[1]["entries"]) == 2, 60)

    status, doc = _http("PUT", f"{live_api}/v1/profiles/ada", _signed_body("ada", "Ada L."))
    assert (status, doc) == (202, {"playerId": "ada"})
    poll(
        "the profile reaches the page",
        lambda: (
            (_http("GET", top)[1]["entries"][0]["profile"] or {}).get("displayName") == "Ada L."
        ),
        60,
    )
    entries = _http("GET", top)[1]["entries"]
    assert entries[0]["profile"]["avatarUrl"] == "https://img.example/ada.png"
    assert entries[1]["profile"] is None  # bob has none: still answered
    assert all("profile" not in e for e in _http("GET", f"{top}&profile=false")[1]["entries"])
    _, around = _http("GET", f"{live_api}/v1/leaderboards/{GAME}/players/bob/neighbors?k=1")
    assert around["above"][0]["profile"]["displayName"] == "Ada L."

    status, doc = _http("PUT", f"{live_api}/v1/profiles/bob", _signed_body("bob", "Bob", STRANGER))
    assert (status, doc["error"]["code"]) == (401, "SIGNATURE")
    bad = {**_signed_body("bob", "Bob"), "country": "fr"}
    assert _http("PUT", f"{live_api}/v1/profiles/bob", bad)[0] == 400


def test_verify_finds_a_tampered_profile_and_rebuild_restores_it(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
    tmp_path: Path,
) -> None:
    _stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=5, count=100)
    expected = _produce_profiles(env)
    _run_job(tmp_path, env)
    audit = lb(["verify", "--json", "--quiet"], env, timeout=300)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    profiles = json.loads(audit.stdout)["profiles"]
    assert profiles["equal"] and profiles["players"] == sum(1 for v in expected.values() if v)

    victim, erased = PLAYERS[3], PLAYERS[101]
    wanted = expected[victim]
    redis_client.hset(
        ProfileKeys(namespace, bucket_of(victim)).profiles,
        victim,
        stored_bytes({**wanted, "displayName": "Mallory"}),  # type: ignore[typeddict-item]
    )
    redis_client.hset(  # a profile the log erased, back by hand
        ProfileKeys(namespace, bucket_of(erased)).profiles,
        erased,
        stored_bytes(_named(erased)),
    )
    audit = lb(["verify", "--json", "--quiet"], env, timeout=300)
    assert audit.returncode == 1, audit.stdout + audit.stderr
    found = json.loads(audit.stdout)["profiles"]
    assert found["differences"] == 2
    assert {e["playerId"]: e["log"] for e in found["examples"]} == {victim: wanted, erased: None}

    rebuilt = lb(["rebuild"], env, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "profiles:" in rebuilt.stderr
    _check_projection(redis_client, namespace, expected)
    assert lb(["verify", "--quiet"], env, timeout=300).returncode == 0


def test_the_running_job_heals_a_bucket_that_redis_lost(
    live_job: Any,
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
    tmp_path: Path,
) -> None:
    from tests.integration.streams import GAMES_TOML, job_env
    from tests.poll import poll

    games = tmp_path / "g.toml"
    games.write_text(GAMES_TOML)
    settings = Settings.from_env(job_env(topic, namespace, tmp_path / "x", games))
    ensure_profiles_topic(settings)
    reader = ProfileReader(redis_client, namespace)

    def send(players: list[str], version: int) -> None:
        with profile_producer(settings) as producer:
            for player in players:
                doc = _named(player, version)
                produce_profile(
                    producer,
                    CODEC,
                    sign_profile(
                        KEYRING,
                        "k2",
                        player_id=player,
                        display_name=doc["displayName"],
                        avatar_url=doc["avatarUrl"],
                        country=doc["country"],
                        updated_at_ms=doc["updatedAt"],
                    ),
                )
            producer.flush(30)

    first = PLAYERS[:40]
    send(first, 1)
    poll("the profiles are projected", lambda: len(reader.lookup(first)) == 40, 60)

    # Redis loses one bucket (both its profiles and its watermarks), as a cluster
    # master restarted from an older snapshot would.
    lost = bucket_of(first[0])
    keys = ProfileKeys(namespace, lost)
    redis_client.delete(keys.profiles, keys.offsets)
    gone = [p for p in first if bucket_of(p) == lost]
    assert not reader.lookup(gone)

    # The next records of each partition find a watermark the worker did not write:
    # it re-reads the partitions from there and the bucket comes back whole.
    send(PLAYERS[40:100], 1)
    poll(
        "the lost bucket is healed from Kafka",
        lambda: (
            reader.lookup(first + PLAYERS[40:100])
            == {p: _named(p, 1) for p in first + PLAYERS[40:100]}
        ),
        60,
    )
