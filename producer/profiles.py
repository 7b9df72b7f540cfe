"""Producing profile records: signed profiles and tombstones, keyed by playerId.

``lb profiles set|delete`` and the HTTP ``PUT /v1/profiles/{playerId}`` use
these. The profiles topic is created compacted when it is missing (with the
score topic's partition count), because a topic the broker auto-creates would
delete old profiles by age instead of keeping each player's newest one.
"""

from __future__ import annotations

from config.settings import Settings
from domain.profiles import ProfileRecord
from producer.score_producer import ScoreProducer, ensure_topic
from schemas.profile_codec import ProfileCodec

#: Partitions of a profiles topic made when the score topic does not exist either.
DEFAULT_PARTITIONS = 4


def ensure_profiles_topic(settings: Settings, partitions: int = DEFAULT_PARTITIONS) -> None:
    """Create the compacted profiles topic when it is missing (idempotent)."""
    ensure_topic(
        settings.kafka_bootstrap,
        settings.profiles_topic,
        partitions,
        settings.kafka_extra,
        {"cleanup.policy": "compact"},
    )


def profile_producer(settings: Settings) -> ScoreProducer:
    """An idempotent producer to the profiles topic (acks=all)."""
    return ScoreProducer(settings.kafka_bootstrap, settings.profiles_topic, settings.kafka_extra)


def produce_profile(producer: ScoreProducer, codec: ProfileCodec, record: ProfileRecord) -> None:
    """Queue one signed profile record, keyed by its playerId."""
    producer.produce_record(record.player_id.encode(), codec.encode(record))


def produce_erasure(producer: ScoreProducer, player_id: str) -> None:
    """Queue the tombstone that erases a player's profile."""
    producer.produce_record(player_id.encode(), None)
