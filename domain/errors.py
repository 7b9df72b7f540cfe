"""The project's own exception hierarchy.

Third-party errors are wrapped (``raise X(...) from exc``) at the edge so
callers only ever need to catch :class:`LeaderboardError` subclasses.
"""


class LeaderboardError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigError(LeaderboardError):
    """Settings or game configuration are invalid; raised before any I/O."""


class EncodingError(LeaderboardError):
    """A value cannot be represented exactly (e.g. a composite score past 2**53)."""


class CodecError(LeaderboardError):
    """A record could not be decoded; ``code`` is the dead-letter code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class ServiceError(LeaderboardError):
    """A local service (Kafka, Redis) failed to start, stop or answer."""


class MissingTopic(ServiceError):
    """A Kafka topic that should exist does not (or has no partitions)."""


class RetryBudgetExceeded(ServiceError):
    """A service stayed unreachable for longer than its retry budget (``LB_*_RETRY_S``).

    Raised instead of waiting for ever, so a supervisor or an operator sees
    the outage; the job's writes are idempotent, so a restart is safe.
    """


class StopRequested(ServiceError):
    """The job was asked to stop while a service was failing: the call was abandoned.

    Nothing it would have written was acknowledged, so nothing is lost: the
    next start replays from the last snapshot, and the offset watermarks keep
    that replay exact.
    """


class QueryError(LeaderboardError):
    """A reader asked for something malformed (unknown window id, bad limit, ...)."""


class Deposed(LeaderboardError):
    """The projection's lease went to another deployment, which writes it now.

    Its writes are refused (the group-write script's epoch check), so it stops
    without applying what it holds; the active deployment has those records.
    """
