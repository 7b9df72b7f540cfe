"""The job's dataflow in-process: ``flows.scoreboard.wire`` under ``bytewax.testing``.

The real steps (Bytewax operators, the validator with either decode engine,
real Avro bytes signed with a real keyring) run in this process with a
testing source in place of Kafka and testing sinks in place of the Redis
board sink and the dead-letter producer. What the sinks then do with Redis
and Kafka is proven by tests/integration (test_job_end_to_end.py and the
others); this checks, in a second, that every record reaches exactly one of
the two sinks, with the reason when it is refused.
"""

from __future__ import annotations

import uuid

import pytest
from bytewax.testing import TestingSink, TestingSource, run_main

from domain.games import GameCatalog
from domain.outcomes import DeadLetterCode
from domain.profile_batches import ProfileBatch, ProfileValidator
from domain.records import CheckedBatch, RecordBatch, SourceRecord
from domain.signing import parse_keyring, signed_event
from domain.validation import Validator
from flows.scoreboard import ProfileParts, wire
from schemas.codec import ScoreEventCodec
from schemas.decode_verify import decode_verifier
from schemas.profile_codec import ProfileCodec

KEYRING = parse_keyring("k1:" + "11" * 32)
CATALOG = GameCatalog.from_toml('[games."g"]\nmax_score = 1000\n')
TS = 1_778_068_800_000  # 2026-05-06T12:00:00Z


def _record(offset: int, player: str, score: int, key: str | None = None) -> SourceRecord:
    event = signed_event(
        KEYRING,
        "k1",
        event_id=uuid.uuid4().hex,
        game_id="g",
        player_id=player,
        score=score,
        ts_ms=TS,
    )
    value = ScoreEventCodec.from_registry().encode(event)
    return SourceRecord(offset, TS, (key or player).encode(), value)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_every_record_reaches_the_boards_or_the_dead_letters_once(engine: str) -> None:
    batches = [
        RecordBatch(
            "scores",
            0,
            (
                _record(0, "ada", 300),
                SourceRecord(1, TS, b"bob", b"not avro"),
                _record(2, "cy", 5000),  # above max_score
            ),
        ),
        RecordBatch("scores", 1, (_record(7, "dee", 10, key="someone-else"),)),
        RecordBatch("scores", 1, (_record(8, "eve", 20),)),
    ]
    validator = Validator(CATALOG, decode_verifier(KEYRING, engine=engine))
    boards: list[CheckedBatch] = []
    letters: list[CheckedBatch] = []
    run_main(
        wire(
            TestingSource(batches), validator.check_batch, TestingSink(boards), TestingSink(letters)
        )
    )

    # Both sinks see every checked batch, in each partition's order.
    assert [(b.partition, b.last_offset) for b in boards] == [(0, 2), (1, 7), (1, 8)]
    assert letters == boards
    accepted = [(a.offset, a.event.player_id, a.event.score) for b in boards for a in b.accepted]
    assert accepted == [(0, "ada", 300), (8, "eve", 20)]
    dead = [(d.partition, d.record.offset, d.code) for b in letters for d in b.dead]
    assert dead == [
        (0, 1, DeadLetterCode.DECODE),
        (0, 2, DeadLetterCode.BOUNDS),
        (1, 7, DeadLetterCode.SCHEMA),
    ]


def test_without_a_dead_letter_sink_the_boards_still_see_every_batch() -> None:
    """``lb rebuild`` runs the flow without dead letters (the live job wrote them)."""
    validator = Validator(CATALOG, decode_verifier(KEYRING, engine="python"))
    boards: list[CheckedBatch] = []
    batches = [RecordBatch("scores", 0, (SourceRecord(0, TS, b"x", b"junk"),))]
    run_main(wire(TestingSource(batches), validator.check_batch, TestingSink(boards), None))
    assert [(len(b.accepted), len(b.dead)) for b in boards] == [(0, 1)]


def test_one_input_carries_both_topics_and_each_batch_reaches_its_own_steps() -> None:
    """The profiles topic shares the scores' input (epochs step together); a branch splits it."""
    validator = Validator(CATALOG, decode_verifier(KEYRING, engine="python"))
    profile_check = ProfileValidator(ProfileCodec.from_registry().decode, KEYRING).check_batch
    boards: list[CheckedBatch] = []
    letters: list[CheckedBatch] = []
    profiles: list[ProfileBatch] = []
    profile_letters: list[CheckedBatch] = []
    batches = [
        RecordBatch("scores", 0, (_record(0, "ada", 300),)),
        RecordBatch("scores.profiles", 0, (SourceRecord(4, TS, b"ada", b"not a profile"),)),
        RecordBatch("scores", 1, (_record(7, "bob", 20),)),
    ]
    parts = ProfileParts(
        "scores.profiles", profile_check, TestingSink(profiles), TestingSink(profile_letters)
    )
    run_main(
        wire(
            TestingSource(batches),
            validator.check_batch,
            TestingSink(boards),
            TestingSink(letters),
            parts,
        )
    )

    assert [(b.topic, b.partition, b.last_offset) for b in boards] == [
        ("scores", 0, 0),
        ("scores", 1, 7),
    ]
    assert letters == boards
    assert [(p.topic, p.last_offset, len(p.dead)) for p in profiles] == [("scores.profiles", 4, 1)]
    assert [(p.topic, [d.record.offset for d in p.dead]) for p in profile_letters] == [
        ("scores.profiles", [4])
    ]
