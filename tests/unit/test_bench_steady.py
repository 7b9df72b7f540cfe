"""bench.steady's stream and summaries: what it produces is what the section says."""

from __future__ import annotations

from bench.common import machine
from bench.steady import NEW_SHARE, latency, markdown, player_id, records
from config.settings import DEV_KEYRING
from domain.signing import Verdict, parse_keyring, verify
from schemas.codec import ScoreEventCodec


def test_the_stream_is_signed_keyed_by_player_and_one_fifth_new_players() -> None:
    keyring = parse_keyring(DEV_KEYRING)
    codec = ScoreEventCodec.from_registry()
    players = 1000
    stream = list(records(keyring, 1_800_000_000_000, 5000, players, seed=3))
    events = [codec.decode(value) for _, value, _ in stream]
    assert all(verify(keyring, event) is Verdict.OK for event in events)
    pairs = list(zip(stream, events, strict=True))
    assert all(key == event.player_id.encode() for (key, _, _), event in pairs)
    assert len({event.event_id for event in events}) == len(events)
    new = [event for event in events if int(event.player_id[1:]) >= players]
    # Each new player posts once; the rest come from the loaded players.
    assert len({event.player_id for event in new}) == len(new)
    assert abs(len(new) / len(events) - NEW_SHARE) < 0.03
    assert all(ts == event.ts_ms for (_, _, ts), event in pairs)


def test_latency_summary_and_the_section_rows() -> None:
    assert latency([]) == {"calls": 0, "p50": None, "p99": None, "max": None}
    summary = latency([float(n) for n in range(1, 101)])
    assert summary == {"calls": 100, "p50": 50.0, "p99": 99.0, "max": 100.0}
    reads = {call: summary for call in ("top-10", "rank", "around")}
    run = {
        "bound": 0,
        "rate": 12345,
        "redis_us_per_record": 9.5,
        "writes": 10,
        "write_mean_ms": 50.0,
        "write_max_ms": 120.0,
        "reads": reads,
        "memory": {"board_bytes_per_member": 100.0},
    }
    text = markdown(
        {
            "command": "python -m bench.steady",
            "machine": machine(),
            "params": {"players": 1000, "events": 500, "read_rate": 200.0},
            "runs": [run, {**run, "bound": 1000}],
            "idle": reads,
        }
    )
    assert "| 0 (no bound) | 12,345 |" in text
    assert "| 1000 | 12,345 |" in text
    assert "| job stopped |" in text
    assert text.count("50 / 99 / 100") == 9
    assert player_id(7) == "p0000007"
