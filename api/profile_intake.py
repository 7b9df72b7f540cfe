"""Signed profile intake: verify like the job will, produce, answer once Kafka acknowledged.

``PUT /v1/profiles/{playerId}`` carries a profile signed with a key of
``LB_HMAC_KEYS`` over the canonical string of :func:`domain.profiles.canonical`;
the intake checks the signature (401) and the field rules (400) exactly as the
job will, then produces the record, Avro-encoded and keyed by playerId, to the
profiles topic. It is a write: when writes are authenticated, only a server API
key may call it (players hold no signing key). The profiles topic is created,
compacted, by the first request when it is missing.
"""

from __future__ import annotations

from http import HTTPStatus

from api.errors import ApiError, invalid_body
from api.intake import AckingProducer
from api.models import ProfileIn
from domain.outcomes import DeadLetterCode as Code
from domain.profiles import ProfileRecord, profile_problem, verify_profile
from domain.signing import Keyring, Verdict
from schemas.profile_codec import ProfileCodec


class ProfileIntake:
    """Checks signed profiles and hands them to their own :class:`AckingProducer`."""

    def __init__(self, keyring: Keyring, codec: ProfileCodec, producer: AckingProducer) -> None:
        self._keyring = keyring
        self._codec = codec
        self._producer = producer

    def check(self, player_id: str, body: ProfileIn) -> ProfileRecord:
        """The record of a validated body, verified as the job will; ApiError if not."""
        record = ProfileRecord(
            player_id,
            body.displayName,
            body.avatarUrl,
            body.country,
            body.updatedAt,
            body.keyId,
            bytes.fromhex(body.sig),
        )
        verdict = verify_profile(self._keyring, record)
        if verdict is Verdict.UNKNOWN_KEY:
            raise ApiError(
                HTTPStatus.UNAUTHORIZED, Code.UNKNOWN_KEY, f"unknown keyId {body.keyId!r}"
            )
        if verdict is not Verdict.OK:
            raise ApiError(
                HTTPStatus.UNAUTHORIZED, Code.SIGNATURE, "the signature does not match the profile"
            )
        problem = profile_problem(record)
        if problem is not None:
            raise invalid_body(problem)
        return record

    async def submit(self, player_id: str, body: ProfileIn) -> None:
        """Check the profile, produce it, wait for Kafka's acknowledgement."""
        record = self.check(player_id, body)
        await self._producer.send_records([(player_id.encode(), self._codec.encode(record))])

    def close(self) -> None:
        self._producer.close()
