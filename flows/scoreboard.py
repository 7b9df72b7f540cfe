"""The score-events -> Redis boards dataflow. Wiring only; logic is in ``domain``.

Run it the Bytewax way::

    python -m bytewax.run "flows.scoreboard:build()" -r <recovery dir> -s 5 -b 0
    python -m bytewax.run "flows.scoreboard:build(until_end=True)" ...

or through ``lb run`` (same thing, with the recovery store under
``LB_STATE_DIR`` and the topics checked first). Settings come from the
environment, read once here at the edge.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

import bytewax.operators as op
from bytewax.dataflow import Dataflow, Stream
from bytewax.inputs import Source
from bytewax.outputs import Sink

from adapters.redis import RedisClient
from config.clients import job_redis_client
from config.heap import collector_paused, tune_for_streaming
from config.settings import Settings
from domain.backoff import Backoff
from domain.errors import LeaderboardError
from domain.lease import Role
from domain.profile_batches import ProfileBatch, ProfileValidator
from domain.records import CheckedBatch, RecordBatch
from domain.rewinds import Rewinds
from domain.validation import Validator
from flows import lease, preflight, progress
from schemas.decode_verify import decode_verifier
from schemas.profile_codec import ProfileCodec
from sinks.boards import RedisBoardSink, ResumeFromRedis
from sinks.dead_letters import DeadLetterSink, check_transactions
from sinks.profiles import RedisProfileSink, ResumeProfiles
from sources.kafka_source import ScoreTopicSource, StopSignal, TopicInput
from telemetry import derive, hooks, job, watchdog

log = logging.getLogger(__name__)

FLOW_ID = "scoreboard"


def _install_stop_handlers(stop: StopSignal) -> None:
    """SIGINT/SIGTERM end the flow cleanly: sources flush their batch and stop.

    Without this, Bytewax 0.21 raises KeyboardInterrupt inside whichever
    operator runs, which surfaces as a panic instead of a clean exit.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: finishing the current batches and stopping", signum)
        stop.set()

    try:
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. bytewax.testing): no handlers
        pass


def _checked(
    dead_letters: bool, namespace: str | None
) -> tuple[Settings, preflight.JobConfig, dict[str, int]]:
    """Settings, games and keys checked, and the services asked once, before the flow exists.

    Started by hand (``python -m bytewax.run``), a mistake would otherwise
    surface as a panic inside Bytewax with the cause buried in it; here it is
    one line on stderr and exit code 2, like every ``lb`` command.
    """
    try:
        settings = Settings.from_env()
        config = preflight.job_config(settings)
        topics = preflight.check_services(settings, need_dead_letter_topic=dead_letters)
        if dead_letters:
            check_transactions(
                settings.kafka_config(), settings.namespace, settings.dlq_topic, 60.0
            )
        job.start(settings, FLOW_ID, namespace)  # metrics, health, logs (issue 13)
    except LeaderboardError as exc:
        print(f"{FLOW_ID}: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from exc
    return settings, config, topics


@dataclass(frozen=True)
class ProfileParts:
    """The profiles topic's steps: its checks, its Redis and dead-letter sinks."""

    #: The profiles topic: the one source reads it beside the scores (see ScoreTopicSource).
    topic: str
    check: Callable[[RecordBatch], ProfileBatch]
    profiles: Sink[ProfileBatch]
    dead_letters: Sink[CheckedBatch] | None


def wire(
    source: Source[RecordBatch],
    validate: Callable[[RecordBatch], CheckedBatch],
    boards: Sink[CheckedBatch],
    dead_letters: Sink[CheckedBatch] | None,
    profiles: ProfileParts | None = None,
) -> Dataflow:
    """The steps, given their parts: read batches, validate each, write letters and boards.

    :func:`build` passes the Kafka source and the Redis and Kafka sinks; a
    test passes ``bytewax.testing``'s source and sinks (tests/unit/test_flow.py).
    ``profiles`` adds the profiles topic's steps beside them (:func:`wire_profiles`).
    """
    flow = Dataflow(FLOW_ID)
    batches = op.input("score_events", flow, source)
    if profiles is not None:
        # One input for both topics, so their epochs step together.
        topic = profiles.topic
        split = op.branch("by_topic", batches, lambda batch: batch.topic != topic)
        batches = split.trues
        wire_profiles(split.falses, profiles)
    # RecordBatch(topic, partition, records=(SourceRecord(offset, ts, key, value), ...))
    checked = op.map("validate", batches, hooks.timed("validate", validate))
    # CheckedBatch(accepted=(Accepted(offset, event, game, windows), ...), dead=(DeadLetter, ...))
    if dead_letters is not None:
        op.output("dead_letters", checked, dead_letters)
    op.output("boards", checked, boards)
    return flow


def wire_profiles(batches: Stream[RecordBatch], parts: ProfileParts) -> None:
    """Profiles topic -> checked batches -> profile buckets in Redis, refused -> dead letters."""
    # RecordBatch(topic, partition, records=(SourceRecord(offset, ts, key, value or None), ...))
    checked = op.map("check_profiles", batches, parts.check)
    # ProfileBatch(changes=(ProfileChange(offset, playerId, Profile or None), ...), dead=(...))
    if parts.dead_letters is not None:
        letters = op.map("profile_letters", checked, ProfileBatch.letters)
        # CheckedBatch(accepted=(), dead=(DeadLetter, ...))
        op.output("profile_dead_letters", letters, parts.dead_letters)
    op.output("profiles", checked, parts.profiles)


def _hold_lease(settings: Settings, stop: StopSignal) -> lease.LeaseKeeper:
    """The lease of the projection, once this deployment holds it (a standby waits here).

    Refused (``LB_STANDBY=refuse``): one line and exit 2. Asked to stop while
    waiting: exit 0, nothing was read.
    """
    keeper = lease.start(
        settings,
        lease.client(settings),
        settings.namespace,
        derive.cluster_args(sys.argv),
        on_deposed=lambda line: stop.set(),
    )
    role = keeper.wait_active(stop.is_set)
    if role is Role.REFUSED:
        print(f"{FLOW_ID}: error: {keeper.describe()}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    if role is not Role.ACTIVE:
        log.info("stopped while waiting as a standby")
        raise SystemExit(0)
    return keeper


def _profile_parts(
    settings: Settings,
    config: preflight.JobConfig,
    topics: dict[str, int],
    dead_letters: bool,
    target: str,
    until_end: bool,
    stop: StopSignal,
    fence: Callable[[], int] | None,
) -> tuple[TopicInput, ProfileParts] | None:
    """The profiles topic's input and steps when it exists (``lb run`` creates it), else None."""
    if settings.profiles_topic not in topics:
        log.info("no profiles topic %r: pages carry no profiles", settings.profiles_topic)
        return None
    if dead_letters and settings.profiles_dlq_topic not in topics:
        print(
            f"{FLOW_ID}: error: the profiles dead-letter topic {settings.profiles_dlq_topic!r} "
            "(LB_PROFILES_DLQ_TOPIC) does not exist: `lb run` creates it",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(2)
    retry = Backoff(budget_s=settings.redis_retry_s)
    rewinds = Rewinds()

    def redis() -> RedisClient:
        return job_redis_client(settings)

    topic = TopicInput(
        settings.profiles_topic, ResumeProfiles(redis, target, retry), rewinds=rewinds
    )
    letters = (
        DeadLetterSink(
            settings.kafka_config(),
            settings.profiles_dlq_topic,
            settings.profiles_topic,
            delivery_timeout_s=settings.kafka_retry_s,
            fence=fence,
            namespace=settings.namespace,
        )
        if dead_letters
        else None
    )
    check = ProfileValidator(ProfileCodec.from_registry().decode, config.keyring).check_batch
    sink = RedisProfileSink(redis, target, retry, rewinds, stopping=stop.is_set)
    return topic, ProfileParts(settings.profiles_topic, check, sink, letters)


def build(
    until_end: bool = False, namespace: str | None = None, dead_letters: bool = True
) -> Dataflow:
    """The dataflow.

    ``until_end`` stops at the end offsets seen at start; ``namespace``
    overrides ``LB_NAMESPACE`` (``lb rebuild`` builds into a staging one);
    ``dead_letters=False`` leaves the dead-letter topic alone (a rebuild
    replays records the live job already dead-lettered).
    """
    settings, config, topics = _checked(dead_letters, namespace)
    if settings.uses_dev_keys:
        log.warning("LB_HMAC_KEYS is unset: using the insecure built-in development key")
    # A tournament's max_entries is split into seats per partition of the topic.
    partitions = {settings.topic: topics[settings.topic]}
    for warning in preflight.seat_warnings(config.catalog, topics[settings.topic]):
        log.warning("%s", warning)
    stop = StopSignal()
    _install_stop_handlers(stop)
    # The live projection is written by one deployment at a time (a rebuild's
    # staging namespace is its own): wait here as a standby while another holds it.
    keeper = _hold_lease(settings, stop) if namespace in (None, settings.namespace) else None
    fence = None if keeper is None else keeper.epoch
    progress.start(settings.progress_s)
    if not until_end:
        watchdog.start(FLOW_ID)  # a tailing cluster process exits when a peer is lost
    validator = Validator(config.catalog, decode_verifier(config.keyring, engine=settings.decoder))

    target = namespace or settings.namespace
    retry = Backoff(budget_s=settings.redis_retry_s)
    # The board sink asks the source to re-read a range when Redis lost writes.
    rewinds = Rewinds()

    def redis() -> object:
        return job_redis_client(settings)

    profiles = _profile_parts(
        settings, config, topics, dead_letters, target, until_end, stop, fence
    )
    source = ScoreTopicSource(
        settings.kafka_config(),
        settings.topic,
        batch_ms=settings.batch_ms,
        batch_max=settings.batch_max,
        until_end=until_end,
        stop=stop,
        rewinds=rewinds,
        resume=ResumeFromRedis(redis, target, retry),
        tick_ms=settings.heal_check_s * 1000,
        also=[profiles[0]] if profiles is not None else [],
    )
    letters = (
        DeadLetterSink(
            settings.kafka_config(),
            settings.dlq_topic,
            settings.topic,
            delivery_timeout_s=settings.kafka_retry_s,
            fence=fence,
            namespace=settings.namespace,
        )
        if dead_letters
        else None
    )
    boards = RedisBoardSink(
        redis,
        target,
        settings.dedupe_horizon_s * 1000,
        settings.cache_players,
        retry=retry,
        rewinds=rewinds,
        heal_check_s=settings.heal_check_s,
        stopping=stop.is_set,
        partitions=partitions,
        max_updates=settings.write_max_updates,
        writes_in_flight=settings.writes_in_flight,
        fence=fence,
        games=config.catalog.lookup,
    )
    # A batch's records live until its boards are written: no collection walks
    # them on the way (config/heap.py; the board sink pauses the collector too).
    validate = collector_paused()(validator.check_batch)
    flow = wire(source, validate, boards, letters, profiles[1] if profiles else None)
    # The flow is built once per worker process, before it consumes anything.
    tune_for_streaming()
    return flow


__all__ = ["CheckedBatch", "ProfileParts", "RecordBatch", "build", "wire", "wire_profiles"]
