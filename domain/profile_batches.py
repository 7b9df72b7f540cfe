"""A batch of profile records -> the changes to project and the records to dead-letter.

Pure: the decoder is passed in (``schemas.profile_codec.ProfileCodec.decode``),
so the rules are testable without Kafka. What each record does is decided by
that record alone (see :mod:`domain.profiles` for why): set, erase, or
dead-letter and erase.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from domain.errors import CodecError
from domain.outcomes import DeadLetterCode
from domain.profiles import Profile, ProfileRecord, profile_of, profile_problem, verify_profile
from domain.records import CheckedBatch, DeadLetter, RecordBatch, SourceRecord
from domain.signing import Keyring, Verdict


class ProfileChange(NamedTuple):
    """What one record does to one player's profile: set it, or erase it (``None``)."""

    offset: int
    player_id: str
    profile: Profile | None


@dataclass(frozen=True, slots=True)
class ProfileBatch:
    """One partition's records of the profiles topic, checked."""

    topic: str
    partition: int
    changes: tuple[ProfileChange, ...]
    dead: tuple[DeadLetter, ...]
    last_offset: int
    generation: int = 0

    def letters(self) -> CheckedBatch:
        """The batch as the dead-letter sink takes it (no board updates)."""
        return CheckedBatch(
            self.topic, self.partition, (), self.dead, self.last_offset, self.generation
        )


class ProfileValidator:
    """Decodes, verifies and checks profile records, batch by batch."""

    def __init__(self, decode: Callable[[bytes], ProfileRecord], keyring: Keyring) -> None:
        self._decode = decode
        self._keyring = keyring

    def check_batch(self, batch: RecordBatch) -> ProfileBatch:
        """Every record of ``batch`` as a change, a dead letter, or both."""
        changes: list[ProfileChange] = []
        dead: list[DeadLetter] = []
        for record in batch.records:
            player, change, problem = self._check(record)
            if problem is not None:
                code, detail = problem
                dead.append(DeadLetter(batch.topic, batch.partition, record, code, detail))
            if player is not None:
                changes.append(ProfileChange(record.offset, player, change))
        last = batch.records[-1].offset if batch.records else batch.next_offset - 1
        return ProfileBatch(
            batch.topic, batch.partition, tuple(changes), tuple(dead), last, batch.generation
        )

    def _check(
        self, record: SourceRecord
    ) -> tuple[str | None, Profile | None, tuple[str, str] | None]:
        """``(player the record is about, its profile or None, (code, detail) or None)``."""
        if record.key is None:
            return None, None, (DeadLetterCode.SCHEMA.value, "a profile record needs a key")
        try:
            player = record.key.decode()
        except UnicodeDecodeError:
            return None, None, (DeadLetterCode.SCHEMA.value, "the record key is not UTF-8")
        if record.value is None:
            return player, None, None  # a tombstone: the profile is erased
        try:
            decoded = self._decode(record.value)
        except CodecError as exc:
            return player, None, (exc.code, exc.detail)
        if decoded.player_id != player:
            detail = f"playerId {decoded.player_id[:80]!r} differs from the key {player[:80]!r}"
            return player, None, (DeadLetterCode.SCHEMA.value, detail)
        verdict = verify_profile(self._keyring, decoded)
        if verdict is Verdict.UNKNOWN_KEY:
            detail = f"key id {decoded.key_id[:64]!r} is not in LB_HMAC_KEYS"
            return player, None, (DeadLetterCode.UNKNOWN_KEY.value, detail)
        if verdict is not Verdict.OK:
            detail = f"signature does not match (key id {decoded.key_id[:64]!r})"
            return player, None, (DeadLetterCode.SIGNATURE.value, detail)
        problem = profile_problem(decoded)
        if problem is not None:
            return player, None, (DeadLetterCode.BOUNDS.value, problem)
        return player, profile_of(decoded), None
