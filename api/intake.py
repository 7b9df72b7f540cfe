"""Signed score intake: verify like the job will, produce, answer once Kafka acknowledged.

The signature is verified before any other rule (as the job does), so the
answers distinguish "not yours to send" (401) from "yours but invalid" (400).
The record the job later reads is exactly what the game server signed: same
eventId, same signature, Avro-encoded with ``schemas.codec``, keyed by playerId.

``eventId`` may be omitted. The client then signs the canonical string with an
empty eventId; the intake derives the id from the signed content (``api-`` +
32 hex digits of its SHA-256, so a retried request gets the same id and is
deduplicated by the job) and re-signs the record with the same key.

Delivery: 202 only after Kafka acknowledged every record of the request
(acks=all, idempotent producer); a failure answers 503 and the client retries
(idempotent thanks to the eventId). Concurrent requests share one producer
without a lock: each record carries its own delivery callback, which settles
its request's asyncio future when the event loop serves the delivery reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable, Sequence
from http import HTTPStatus

from api.errors import ApiError, invalid_body
from api.models import ScoreEventIn
from domain.errors import ServiceError
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog, valid_game_id
from domain.outcomes import DeadLetterCode as Code
from domain.signing import Keyring, Verdict, canonical, sign, verify
from producer.score_producer import ScoreProducer
from schemas.codec import ScoreEventCodec

#: How long a request waits for Kafka to acknowledge its records.
ACK_TIMEOUT_S = 10.0
#: The producer waits this long to batch records of concurrent requests.
INTAKE_LINGER_MS = "1"
#: How often the event loop serves delivery reports while records are outstanding.
POLL_S = 0.0005


class AckingProducer:
    """One Kafka producer shared by every request; :meth:`send` resolves on acknowledgement.

    Delivery reports are served on the event loop itself: while records are
    outstanding, the loop calls the client's non-blocking ``poll(0)`` every
    ``POLL_S``, which runs the reports of the records Kafka acknowledged, and
    each report settles its request's future directly. (A polling thread
    settled them through ``call_soon_threadsafe``: one wake-up of the loop and
    one hand-over of the GIL per record, which cost more than the rest of the
    request; see docs/BENCHMARKS.md.) librdkafka's own threads do the network
    I/O either way. The producer is made on first use (Kafka is contacted only
    by the first ``POST``) and made afresh after a fatal error.
    """

    def __init__(self, factory: Callable[[], ScoreProducer], timeout_s: float) -> None:
        self._factory = factory
        self._timeout_s = timeout_s
        self._producer: ScoreProducer | None = None
        self._outstanding = 0
        self._timer: asyncio.TimerHandle | None = None

    def _current(self) -> ScoreProducer:
        if self._producer is None:
            self._producer = self._factory()
        return self._producer

    def _poll(self) -> None:
        """Serve the delivery reports that arrived; again soon while records are outstanding."""
        self._timer = None
        producer = self._producer
        if producer is None:
            return
        producer.poll(0)
        if self._outstanding > 0:
            self._timer = asyncio.get_running_loop().call_later(POLL_S, self._poll)

    async def send(self, events: Sequence[ScoreEvent], codec: ScoreEventCodec) -> None:
        """Produce ``events`` and wait until Kafka acknowledged all of them."""
        await self.send_records([(e.player_id.encode(), codec.encode(e)) for e in events])

    async def send_records(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Produce ``(key, value)`` records (None: a tombstone); wait for every acknowledgement."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        left = len(records)
        failed: list[str] = []

        def report(outcome: str | None) -> None:
            nonlocal left
            self._outstanding -= 1
            left -= 1
            if outcome is not None:
                failed.append(outcome)
            if left == 0 and not done.done():
                done.set_result(None)

        try:
            producer = self._current()
            for key, value in records:
                producer.produce_record(key, value, on_delivery=report)
                self._outstanding += 1
        except ServiceError:
            self.close(flush_s=0)  # a fatal producer: start afresh next time
            raise
        if self._timer is None:
            self._timer = loop.call_later(POLL_S, self._poll)
        try:
            async with asyncio.timeout(self._timeout_s):
                await done
        except TimeoutError as exc:
            raise ServiceError(
                f"Kafka did not acknowledge within {self._timeout_s:g} s; retry the request"
            ) from exc
        if failed:
            raise ServiceError(f"Kafka refused the record: {failed[0]}; retry the request")

    def close(self, flush_s: float = 10.0) -> None:
        """Stop polling and deliver what is still queued (up to ``flush_s``)."""
        producer, self._producer = self._producer, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if producer is not None and flush_s > 0:
            # A failure here was already answered 503 to the requests concerned.
            with contextlib.suppress(ServiceError):
                producer.flush(flush_s)
        self._outstanding = 0


def _check_metadata(metadata: str | None, limit: int) -> None:
    """The job's ``METADATA_TOO_LARGE`` rule, answered 400 before anything is produced."""
    if metadata is None:
        return
    try:
        size = len(metadata.encode())
    except UnicodeEncodeError:
        raise invalid_body("metadata is not valid Unicode text (a lone surrogate)") from None
    if size > limit or limit == 0:
        raise ApiError(
            HTTPStatus.BAD_REQUEST,
            Code.METADATA_TOO_LARGE,
            f"metadata is {size} UTF-8 bytes; the game takes at most {limit}",
        )


class ScoreIntake:
    """Checks signed events and hands them to the shared :class:`AckingProducer`."""

    def __init__(
        self,
        keyring: Keyring,
        catalog: GameCatalog,
        codec: ScoreEventCodec,
        producer: AckingProducer,
    ) -> None:
        self._keyring = keyring
        self._catalog = catalog
        self._codec = codec
        self._producer = producer

    def check(self, body: ScoreEventIn) -> ScoreEvent:
        """The event in a validated body, signed as the job will verify it; ApiError if not."""
        kind = EventKind(body.kind)
        claimed = ScoreEvent(
            body.eventId or "",
            body.gameId,
            body.playerId,
            body.score,
            body.timestamp,
            kind,
            body.keyId,
            bytes.fromhex(body.sig),
            body.metadata,
        )
        verdict = verify(self._keyring, claimed)
        if verdict is Verdict.UNKNOWN_KEY:
            raise ApiError(
                HTTPStatus.UNAUTHORIZED, Code.UNKNOWN_KEY, f"unknown keyId {body.keyId!r}"
            )
        if verdict is not Verdict.OK:
            raise ApiError(
                HTTPStatus.UNAUTHORIZED, Code.SIGNATURE, "the signature does not match the event"
            )
        if not valid_game_id(body.gameId):
            raise invalid_body("gameId must be 1..64 of A-Z a-z 0-9 . _ -")
        game = self._catalog.lookup(body.gameId)
        if game is None:
            raise ApiError(
                HTTPStatus.BAD_REQUEST, Code.UNKNOWN_GAME, f"unknown game {body.gameId!r}"
            )
        if kind is EventKind.SCORE and body.score > game.max_score:
            raise ApiError(
                HTTPStatus.BAD_REQUEST, Code.BOUNDS, f"score {body.score} is above {game.max_score}"
            )
        _check_metadata(body.metadata, game.metadata_max_bytes)
        if body.eventId is not None:
            return claimed
        fields = (body.gameId, body.playerId, body.score, body.timestamp, kind)
        meta = body.metadata
        derived = f"api-{hashlib.sha256(canonical('', *fields, meta)).hexdigest()[:32]}"
        resigned = sign(self._keyring, body.keyId, derived, *fields, meta)
        return ScoreEvent(derived, *fields, body.keyId, resigned, meta)

    async def submit(self, bodies: Sequence[ScoreEventIn]) -> list[str]:
        """Check every event (all or nothing), produce them, wait for Kafka; their ids."""
        events = [self.check(body) for body in bodies]
        await self.send(events)
        return [event.event_id for event in events]

    async def send(self, events: Sequence[ScoreEvent]) -> None:
        """Produce checked events and wait until Kafka acknowledged all of them."""
        await self._producer.send(events, self._codec)

    def close(self) -> None:
        self._producer.close()
