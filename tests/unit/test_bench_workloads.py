"""The benchmark's workload shapes are what their names promise."""

from __future__ import annotations

import pytest

from bench.workloads import DAY_MS, WORKLOADS, GeneratedRecord, shape
from domain.signing import Keyring
from schemas.codec import ScoreEventCodec

KEYRING = Keyring({"k1": b"0123456789abcdef0123456789abcdef"})
START = 1_790_000_000_000


def _records(name: str, events: int = 20_000) -> list[GeneratedRecord]:
    codec = ScoreEventCodec.from_registry()
    return list(shape(name).records(KEYRING, codec, START, events, players=1_000_000))


def _new_player_share(name: str) -> float:
    seen: set[bytes] = set()
    new = 0
    records = [r for r in _records(name) if r.expected == "ok"]
    for record in records:
        if record.key not in seen:
            new += 1
            seen.add(record.key)
    return new / len(records)


def test_the_new_players_shape_has_far_more_first_seen_players_than_zipf() -> None:
    assert _new_player_share("new-players") > 2 * _new_player_share("zipf")


def test_live_shapes_advance_record_time_and_history_spans_a_month_out_of_order() -> None:
    live = [r.timestamp_ms for r in _records("zipf")]
    assert live == sorted(live) and live[0] >= START
    history = [r.timestamp_ms for r in _records("history")]
    assert history != sorted(history)
    assert max(history) - min(history) > 29 * DAY_MS
    assert max(history) <= START


def test_every_shape_is_deterministic_and_unknown_names_list_the_choices() -> None:
    for name in WORKLOADS:
        assert _records(name, 500) == _records(name, 500)
    with pytest.raises(KeyError, match="zipf"):
        shape("nope")
