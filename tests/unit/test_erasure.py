"""Erasure records: how the validator takes them and what the planner makes of them.

The planner runs against :class:`tests.unit.boardmodel.BoardModel` (the Lua write's
semantics as dictionaries). An erasure removes the player from every board group
its partition wrote, before or in the same batch, forgets the player's cached
values and tournament attempts, and leaves every later event to count again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from domain.erasure import (
    ERASE_ALL_GAMES,
    Receipt,
    Removed,
    Tombstone,
    erased_keys,
    is_erasure,
)
from domain.events import EventKind
from domain.games import GameCatalog
from domain.keys import GroupKeys
from domain.planner import BoardPlanner
from domain.planner.model import WritePlan
from domain.records import Accepted, CheckedBatch, RecordBatch, SourceRecord
from domain.signing import Keyring, parse_keyring, signed_event
from domain.validation import SCHEMA as SCHEMA_CODE
from domain.validation import SIGNATURE, Rejected, Validator
from jobs.archive_files import SCHEMA
from jobs.archive_scrub import scrub_archives
from schemas.codec import ScoreEventCodec
from schemas.decode_verify import decode_verifier
from tests.unit.boardmodel import BoardModel, project

KEYS = parse_keyring("k1:" + "11" * 32)
FOREIGN = parse_keyring("k1:" + "99" * 32)
CODEC = ScoreEventCodec.from_registry()
T = 1_777_888_000_000  # 2026-05-04
CATALOG = GameCatalog.from_toml(
    """
[default]
max_score = 1000
[games."cup"]
max_score = 1000
[games."cup".tournaments.spring]
start = 2026-05-01T00:00:00Z
end = 2026-05-31T00:00:00Z
max_attempts = 1
"""
)
ENGINES = {
    name: Validator(CATALOG, decode_verifier(KEYS, CODEC, name)) for name in ("python", "native")
}
VALIDATOR = ENGINES["native"]


def _record(
    offset: int, player: str, game: str, score: int, kind: EventKind, *, keys: Keyring = KEYS
) -> SourceRecord:
    event = signed_event(
        keys,
        "k1",
        event_id=f"e{offset}",
        game_id=game,
        player_id=player,
        score=score,
        ts_ms=T + offset,
        kind=kind,
    )
    return SourceRecord(offset, T + offset, player.encode(), CODEC.encode(event, 1))


def _score(offset: int, player: str, game: str, score: int) -> SourceRecord:
    return _record(offset, player, game, score, EventKind.SCORE)


def _erase(offset: int, player: str) -> SourceRecord:
    return _record(offset, player, ERASE_ALL_GAMES, 0, EventKind.RETRACT)


def _batch(*records: SourceRecord) -> CheckedBatch:
    checked = VALIDATOR.check_batch(RecordBatch("t", 0, tuple(records)))
    assert not checked.dead, checked.dead
    return checked


def _on(model: BoardModel, player: str) -> dict[str, float]:
    return {key: board[player] for key, board in model.boards().items() if player in board}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_signed_erasure_is_accepted_with_no_game_and_no_window(engine: str) -> None:
    accepted = ENGINES[engine].check(_erase(5, "p1"))
    assert isinstance(accepted, Accepted) and is_erasure(accepted)
    assert accepted.windows == () and accepted.offset == 5


@pytest.mark.parametrize(
    ("record", "code"),
    [
        (_record(1, "p1", ERASE_ALL_GAMES, 0, EventKind.RETRACT, keys=FOREIGN), SIGNATURE),
        (_record(1, "p1", ERASE_ALL_GAMES, 0, EventKind.SCORE), SCHEMA_CODE),
        (_record(1, "p1", ERASE_ALL_GAMES, 3, EventKind.RETRACT), SCHEMA_CODE),
        (_erase(1, "p1")._replace(key=b"someone-else"), SCHEMA_CODE),
    ],
    ids=["bad-signature", "score-kind", "non-zero-score", "wrong-key"],
)
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_forged_or_malformed_erasure_is_dead_lettered(
    record: SourceRecord, code: str, engine: str
) -> None:
    with pytest.raises(Rejected) as refused:
        ENGINES[engine].check(record)
    assert refused.value.code == code


def test_erasure_reaches_every_group_of_its_partition_and_later_events_count_again() -> None:
    planner, model = BoardPlanner("lb", 300_000), BoardModel()
    project(
        [
            _batch(_score(0, "p1", "g1", 900), _score(1, "p2", "g1", 500)),
            _batch(_score(2, "p1", "g2", 800), _score(3, "p1", "cup", 700)),
        ],
        planner,
        model,
    )
    assert len(_on(model, "p1")) == 3 + 3 + 4  # three windows each, plus the tournament
    others = _on(model, "p2")
    counted = model.stats_total()
    # Erased in a batch of its own: the groups come from the planner's beliefs.
    project([_batch(_erase(4, "p1"))], planner, model)
    # Not counted anywhere (which groups it reaches depends on batching), not a dedupe id.
    assert model.stats_total() == counted
    assert not any("erase" in k or "e4" in h for k, h in model.hashes_with(":meta:seen:").items())
    assert _on(model, "p1") == {}
    assert _on(model, "p2") == others
    assert "p1" not in model.hashes.get("lb:{cup}:meta:attempts:spring", {})
    # A lower score than the erased best now counts: the cache forgot the player,
    # and the tournament's single attempt is available again.
    project([_batch(_score(5, "p1", "g1", 10), _score(6, "p1", "cup", 20))], planner, model)
    assert set(_on(model, "p1")) == {
        "lb:{g1}:alltime",
        f"lb:{{g1}}:{_daily()}",
        f"lb:{{g1}}:{_weekly()}",
        "lb:{cup}:alltime",
        f"lb:{{cup}}:{_daily()}",
        f"lb:{{cup}}:{_weekly()}",
        "lb:{cup}:tournament:spring",
    }
    assert model.hashes["lb:{cup}:meta:attempts:spring"]["p1"] == 1


def _daily() -> str:
    return "daily:2026-05-04"


def _weekly() -> str:
    return "weekly:2026-W19"


def test_erasure_in_the_middle_of_a_batch_keeps_log_order_and_replays_the_same() -> None:
    records = [
        _score(0, "p1", "g1", 900),
        _score(1, "p1", "g2", 800),
        _erase(2, "p1"),
        _score(3, "p1", "g1", 5),
    ]
    one = BoardModel()
    project([_batch(*records)], BoardPlanner("lb", 300_000), one)
    assert set(_on(one, "p1")) == {
        "lb:{g1}:alltime",
        f"lb:{{g1}}:{_daily()}",
        f"lb:{{g1}}:{_weekly()}",
    }
    # The same log in batches of one, and after a restart (a planner that only
    # knows the watermarks Redis holds): the same projection.
    two = BoardModel()
    project([_batch(r) for r in records[:2]], BoardPlanner("lb", 300_000), two)
    restarted = BoardPlanner("lb", 300_000)
    restarted.assume(
        {(GroupKeys("lb", tag).watermarks, "t/0"): at for tag, at in (("g1", 0), ("g2", 1))}
    )
    project([_batch(r) for r in records[2:]], restarted, two)
    assert two.boards() == one.boards()


TEAM_CATALOG = GameCatalog.from_toml(
    """
[default]
max_score = 1000
[games."squad"]
max_score = 1000
teams = "sum"
"""
)


class _Recording(BoardModel):
    """The board model, keeping every plan it applied."""

    def __init__(self) -> None:
        super().__init__()
        self.plans: list[WritePlan] = []

    def apply(self, plan: WritePlan, limit: int | None = None) -> list[int]:
        self.plans.append(plan)
        return super().apply(plan, limit)


def test_an_erasure_alone_in_a_team_games_group_takes_the_player_out_of_the_team_boards() -> None:
    # An erasure names no game; the group's team boards are the catalog's game's.
    validator = Validator(TEAM_CATALOG, decode_verifier(KEYS, CODEC, "native"))

    def batch(*records: SourceRecord) -> CheckedBatch:
        checked = validator.check_batch(RecordBatch("t", 0, tuple(records)))
        assert not checked.dead, checked.dead
        return checked

    planner = BoardPlanner("lb", 300_000, games=TEAM_CATALOG.lookup)
    model = _Recording()
    project([batch(_score(0, "p1", "squad", 70), _score(1, "p2", "squad", 50))], planner, model)
    model.plans.clear()
    project([batch(_erase(2, "p1"))], planner, model)
    (plan,) = model.plans
    (write,) = plan.groups
    assert write.teams is not None
    assert write.teams.keys.game_id == "squad"
    removed = {(c.window_id, c.player_id, c.new) for c in write.teams.changes}
    assert removed == {(w, "p1", None) for w in ("alltime", _daily(), _weekly())}
    assert set(write.teams.slots) == {"alltime", _daily(), _weekly()}


def test_erased_keys_lists_boards_and_tournament_attempts() -> None:
    keys = GroupKeys("lb", "cup")
    reach = erased_keys(keys, {"alltime", "tournament:spring"})
    assert reach == {
        "boards": ["lb:{cup}:alltime", "lb:{cup}:tournament:spring"],
        "attempts": ["lb:{cup}:meta:attempts:spring"],
    }


def test_the_receipt_groups_boards_by_game() -> None:
    receipt = Receipt(
        "p1",
        "t",
        2,
        41,
        "erase:x",
        1000,
        2000,
        (Removed("g1", "g1", "alltime", 9), Removed("g2", "g2/1", "daily:2026-05-04", None)),
        1,
        2,
    )
    answer = receipt.as_json()
    assert answer["boards"] == 2
    assert answer["games"] == {
        "g1": [{"board": "alltime", "score": 9}],
        "g2": [{"board": "daily:2026-05-04", "score": None}],
    }
    assert answer["record"] == {"topic": "t", "partition": 2, "offset": 41, "eventId": "erase:x"}
    assert answer["profile"] == {"removed": False, "record": None}
    assert answer["teams"] == {"removed": [], "record": None}


def test_the_receipt_names_the_profile_and_membership_tombstones() -> None:
    receipt = Receipt(
        "p1",
        "t",
        2,
        41,
        "erase:x",
        1000,
        2000,
        (),
        0,
        0,
        profile=True,
        profile_record=Tombstone("t.profiles", 1, 7),
        teams=(("squad", "red"),),
        teams_record=Tombstone("team-membership", 3, 9),
    )
    answer = receipt.as_json()
    assert answer["profile"] == {
        "removed": True,
        "record": {"topic": "t.profiles", "partition": 1, "offset": 7},
    }
    assert answer["teams"] == {
        "removed": [{"game": "squad", "teamId": "red"}],
        "record": {"topic": "team-membership", "partition": 3, "offset": 9},
    }


def test_archives_are_rewritten_without_the_player_and_the_manifest_follows(
    tmp_path: Path,
) -> None:
    game = tmp_path / "g1"
    (game / "daily").mkdir(parents=True)
    schema = SCHEMA.with_metadata({"leaderboard.window": "daily:2026-05-04"})
    rows = [[1, 2, 3], ["a", "b", "c"], [30, 20, 10], [300, 200, 100], ["car", None, "lap|3"]]
    pq.write_table(pa.table(rows, schema=schema), game / "daily" / "2026-05-04.parquet")
    entry = {"window": "daily:2026-05-04", "file": "daily/2026-05-04.parquet", "rows": 3}
    (game / "manifest.json").write_text(
        json.dumps({"version": 1, "game": "g1", "archives": [entry]})
    )

    done = scrub_archives(tmp_path, "b")
    assert [(s.game, s.window) for s in done] == [("g1", "daily:2026-05-04")]
    table = pq.read_table(game / "daily" / "2026-05-04.parquet")
    assert table.to_pydict() == {
        "rank": [1, 2],
        "playerId": ["a", "c"],
        "score": [30, 10],
        "composite": [300, 100],
        "metadata": ["car", "lap|3"],
    }
    assert table.schema.metadata[b"leaderboard.window"] == b"daily:2026-05-04"
    line = json.loads((game / "manifest.json").read_text())["archives"][0]
    data = (game / "daily" / "2026-05-04.parquet").read_bytes()
    assert (line["rows"], line["bytes"]) == (2, len(data))
    assert line["sha256"] == hashlib.sha256(data).hexdigest()
    assert scrub_archives(tmp_path, "b") == []  # nothing left to remove
