"""Team boards, pure parts: the reference fold, key names, membership records and checks."""

from __future__ import annotations

import pytest

from domain.errors import CodecError
from domain.signing import parse_keyring
from domain.teams import (
    Membership,
    TeamAggregate,
    TeamKeys,
    aggregate,
    membership_canonical,
    team_boards,
    valid_team_id,
)
from schemas.membership import MembershipCodec, check, sign_membership

KEYS = parse_keyring("k1:" + "11" * 32)


@pytest.mark.parametrize(
    ("kind", "scores", "expected"),
    [
        (TeamAggregate.SUM, [3, 4, 5], 12.0),
        (TeamAggregate.BEST, [3, 9, 5], 9.0),
        (TeamAggregate.AVG, [3, 4], 3.5),
        (TeamAggregate.SUM, [0], 0.0),
    ],
)
def test_aggregates(kind: TeamAggregate, scores: list[int], expected: float) -> None:
    assert aggregate(kind, scores) == expected


def test_team_boards_follow_membership_and_scores_only() -> None:
    membership = {"a": "red", "b": "red", "c": "blue", "d": None}
    scores = {"alltime": {"a": 10, "b": 5, "c": 7, "d": 100, "e": 50}, "daily:x": {"b": 1}}
    boards, members = team_boards(TeamAggregate.SUM, membership, scores)
    assert boards == {"alltime": {"red": 15.0, "blue": 7.0}, "daily:x": {"red": 1.0}}
    assert members[("alltime", "red")] == {"a": 10, "b": 5}
    assert ("daily:x", "blue") not in members  # no member scored there: not on the board


def test_key_names_share_the_game_tag() -> None:
    keys = TeamKeys("lb", "g1")
    assert keys.board("daily:2026-05-04") == "lb:{g1}:teams:daily:2026-05-04"
    assert keys.members("alltime", "red") == "lb:{g1}:team:alltime:red"
    assert keys.membership == "lb:{g1}:teams:of"
    assert keys.sums("alltime") == "lb:{g1}:teams:sum:alltime"


@pytest.mark.parametrize("team", ["red", "A.b_c-9", "x" * 64])
def test_valid_team_ids(team: str) -> None:
    assert valid_team_id(team)


@pytest.mark.parametrize("team", ["", "a:b", "a b", "{x}", "x" * 65])
def test_invalid_team_ids(team: str) -> None:
    assert not valid_team_id(team)


def test_canonical_string() -> None:
    assert membership_canonical("p1", "red", 1700) == b"team1|p1|red|1700"
    assert membership_canonical("p1", None, 1700) == b"team1|p1||1700"


def test_records_round_trip_and_are_checked() -> None:
    codec = MembershipCodec()
    joined = codec.encode(sign_membership(KEYS, "k1", "p1", "red", 1700))
    assert check(codec, KEYS, b"p1", joined) == ("p1", "red")
    left = codec.encode(sign_membership(KEYS, "k1", "p1", None, 1700))
    assert check(codec, KEYS, b"p1", left) == ("p1", None)
    assert check(codec, KEYS, b"p1", None) == ("p1", None)  # a tombstone leaves


def _code(key: bytes | None, value: bytes | None) -> str:
    with pytest.raises(CodecError) as caught:
        check(MembershipCodec(), KEYS, key, value)
    return caught.value.code


def test_refused_records_have_their_dead_letter_codes() -> None:
    codec = MembershipCodec()
    good = sign_membership(KEYS, "k1", "p1", "red", 1700)
    assert _code(b"p2", codec.encode(good)) == "SCHEMA"  # key is not the playerId
    assert _code(None, codec.encode(good)) == "SCHEMA"
    assert _code(b"p1", b"\x01junk") == "DECODE"
    assert _code(b"p1", b"\x00\x00\x00\x00\x01" + codec.encode(good)[5:]) == "SCHEMA"
    assert _code(b"p1", codec.encode(good)[:-3]) == "DECODE"
    forged = Membership("p1", "blue", 1700, "k1", good.sig)
    assert _code(b"p1", codec.encode(forged)) == "SIGNATURE"
    unknown = Membership("p1", "red", 1700, "k9", good.sig)
    assert _code(b"p1", codec.encode(unknown)) == "UNKNOWN_KEY"
    bad_team = sign_membership(KEYS, "k1", "p1", "a:b", 1700)
    assert _code(b"p1", codec.encode(bad_team)) == "SCHEMA"
