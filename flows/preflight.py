"""What the job checks before it reads a record, so a mistake costs seconds and one line.

Both ``lb run`` (before it creates the dead-letter topic or a recovery store)
and the flow factory (when Bytewax is started by hand) call these. The
configuration is checked first, without any I/O: the game catalog
(``LB_GAMES``) and the HMAC keyring (``LB_HMAC_KEYS``). Then each service is
asked once, with a short timeout, so a wrong ``LB_REDIS_URL`` or a broker that
is down is reported at once rather than after the job's whole retry budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.clients import game_catalog, probe_kafka, probe_redis
from config.settings import Settings
from domain.errors import ConfigError, ServiceError
from domain.games import GameCatalog
from domain.signing import Keyring, parse_keyring


@dataclass(frozen=True)
class JobConfig:
    """The validated rules the job runs with."""

    catalog: GameCatalog
    keyring: Keyring


def job_config(settings: Settings) -> JobConfig:
    """The game catalog and keyring, or a :class:`ConfigError` naming the setting."""
    try:
        catalog = game_catalog(settings)
    except ConfigError as exc:
        raise ConfigError(f"LB_GAMES: {exc}") from exc
    try:
        keyring = parse_keyring(settings.hmac_keys.reveal())
    except ConfigError as exc:
        raise ConfigError(f"LB_HMAC_KEYS: {exc}") from exc
    return JobConfig(catalog, keyring)


def check_services(settings: Settings, *, need_dead_letter_topic: bool) -> dict[str, int]:
    """Redis answers as configured and the topics exist; partition counts of the broker's topics.

    ``need_dead_letter_topic`` is for a flow started by hand: ``lb run``
    creates that topic itself, after this check.
    """
    probe_redis(settings)
    topics = probe_kafka(settings)
    if settings.topic not in topics:
        raise ServiceError(
            f"LB_TOPIC {settings.topic!r} does not exist on the broker at "
            f"{settings.kafka_bootstrap}: produce to it first (lb produce) or create it"
        )
    if need_dead_letter_topic and settings.dlq_topic not in topics:
        raise ServiceError(
            f"the dead-letter topic {settings.dlq_topic!r} (LB_DLQ_TOPIC) does not exist: "
            f"`lb run` creates it, or create it with {topics[settings.topic]} partitions "
            f"(as many as {settings.topic!r})"
        )
    return topics


def seat_warnings(catalog: GameCatalog, partitions: int) -> list[str]:
    """Tournaments whose ``max_entries`` leaves some partition without a seat.

    Seats are split per partition (``domain.games.Tournament.seats``), so
    with fewer seats than partitions the players of some partitions can never
    enter. Warned, not refused: the topic, not the file, is what changed.
    """
    configs = dict(catalog.games())
    if catalog.default is not None:
        configs["[default]"] = catalog.default
    out = []
    for name, config in sorted(configs.items()):
        cells = partitions * max(1, config.shards)
        for tournament in config.tournaments:
            if tournament.max_entries is not None and tournament.max_entries < cells:
                out.append(
                    f"game {name!r}: tournament {tournament.name!r} has max_entries "
                    f"{tournament.max_entries} for {cells} seat cells ({partitions} partitions"
                    f" x {max(1, config.shards)} shards): the players of "
                    f"{cells - tournament.max_entries} cells can never enter (docs/GAMES.md)"
                )
    return out


def describe_games(catalog: GameCatalog, games_file: object) -> str:
    """The games the job serves, for its start line."""
    if games_file is None:
        return "every game, built-in defaults (LB_GAMES unset)"
    named = ", ".join(sorted(catalog.games())) or "no named game"
    if catalog.default is not None:
        return f"{named} and any other game by [default] ({games_file})"
    return f"{named} only, others dead-lettered UNKNOWN_GAME ({games_file})"
