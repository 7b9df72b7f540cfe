"""The one settings object, read from the environment once, at the edge.

Every other module takes the values it needs as arguments; nothing else in
the project reads ``os.environ``. With nothing set, every address points at
the services ``lb up`` starts (ports recorded in ``<state dir>/services.json``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from domain.errors import ConfigError
from domain.planner import MAX_UPDATES

#: Insecure development key used only when ``LB_HMAC_KEYS`` is unset, so the
#: demo works out of the box. ``lb run`` warns whenever it is in use.
DEV_KEYRING = "dev1:6c622d6465762d6b65792d646f2d6e6f742d7573652d696e2d70726f64756374"

# Below Linux's ephemeral range (32768-60999), so an outgoing connection can
# never hold one of our listening ports when a server (re)starts.
DEFAULT_KAFKA_PORT = 29092
DEFAULT_REDIS_PORT = 26379

#: How ``lb serve --workers N`` hands ``--max-body`` and ``--page-cache-ms`` to
#: the worker processes it spawns (read back as :attr:`Settings.serve_max_body`
#: and :attr:`Settings.serve_page_cache_ms`).
MAX_BODY_ENV = "LB_SERVE_MAX_BODY"
PAGE_CACHE_ENV = "LB_SERVE_PAGE_CACHE_MS"


class Secret(str):
    """A string whose ``repr``/``str`` never reveal the value (use ``.reveal()``)."""

    __slots__ = ()

    def reveal(self) -> str:
        """The secret value itself; call only where it is handed to a client."""
        return str.__str__(self)

    def __repr__(self) -> str:
        return "Secret('***')" if self.reveal() else "Secret('')"

    def __str__(self) -> str:
        return "***" if self.reveal() else ""


def _default_state_dir() -> Path:
    return Path.cwd() / ".lb"


def _recorded_ports(state_dir: Path) -> dict[str, Any]:
    path = state_dir / "services.json"
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Settings:
    """Everything the job, the CLI and the services need, validated on construction."""

    kafka_bootstrap: str
    redis_url: Secret
    topic: str = "score-events"
    dlq_topic: str = "score-events.dlq"
    #: The compacted topic of player profiles (``LB_PROFILES_TOPIC``, see
    #: :func:`profiles_topic_for`).
    #: Empty: derived from ``topic``.
    profiles_topic: str = ""
    #: Where refused profile records go (``LB_PROFILES_DLQ_TOPIC``, default
    #: ``<profiles topic>.dlq``).
    profiles_dlq_topic: str = ""
    #: The compacted membership topic of the team boards (``LB_TEAMS_TOPIC``).
    teams_topic: str = "team-membership"
    hmac_keys: Secret = field(default_factory=lambda: Secret(DEV_KEYRING))
    games_file: Path | None = None
    state_dir: Path = field(default_factory=_default_state_dir)
    #: Downloads kept across ``lb down`` and fresh clones (Kafka jars).
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "realtime-leaderboard")
    #: Extra librdkafka properties (security.protocol, sasl.*, ssl.*), passed through.
    kafka_extra: Mapping[str, str] = field(default_factory=dict)
    redis_username: str | None = None
    redis_password: Secret | None = None
    redis_tls_ca: Path | None = None
    #: ``LB_REDIS_URL`` names one node of a Redis Cluster (cluster-aware client).
    redis_cluster: bool = False
    batch_ms: int = 50
    batch_max: int = 5000
    snapshot_interval_s: int = 5
    dedupe_horizon_s: int = 300
    #: Players whose board values each worker keeps in memory (a generational cache
    #: that holds up to twice this many; ~0.5-0.6 KB each with 3 boards). A miss
    #: costs a read in the batch's one read round trip, never correctness.
    cache_players: int = 2_000_000
    #: Board members a replay process of ``lb rebuild``/``lb backfill`` folds in
    #: memory before it loads them and goes on through Redis (jobs.replay_memory);
    #: 0: every round through Redis.
    replay_memory_members: int = 30_000_000
    #: The most Redis updates (board members and event ids) one atomic group write
    #: makes: Redis serves no reader while a write runs (0: no bound).
    write_max_updates: int = MAX_UPDATES
    #: The most group writes (and long lookups) one job connection has in Redis at
    #: once; the rest wait in the job (sinks.wire): Redis runs what it read of a
    #: connection's pipeline in one pass before it serves a reader (0: all at once).
    writes_in_flight: int = 1
    #: How long the job keeps retrying an unreachable Redis (restart, failover, stall)
    #: before it fails loudly; 0 fails on the first error.
    redis_retry_s: int = 300
    #: Socket timeout of every Redis command and connect: a stalled or silently
    #: partitioned Redis becomes a retried error instead of an endless wait.
    redis_timeout_s: int = 10
    #: How long the dead-letter sink waits for Kafka to acknowledge letters
    #: (librdkafka retries delivery that long) before it fails loudly.
    kafka_retry_s: int = 300
    #: How often each worker re-reads the watermarks it wrote, to notice a Redis
    #: that lost writes on groups it is not writing to (active groups notice at
    #: their next write) and heal them from Kafka.
    heal_check_s: int = 5
    #: Redis key namespace (``<ns>:{game}:...``); tests and ``lb rebuild`` use others.
    namespace: str = "lb"
    #: Seconds between the running job's progress lines on stderr (0: only the summary).
    progress_s: int = 10
    #: Base port of the job's ``/metrics``, ``/livez``, ``/readyz``: process ``i`` of
    #: ``--processes N`` listens on base + i; 0 takes any free port (each process
    #: registers its address under ``<state dir>/run/``); ``None`` (``off``): no server.
    metrics_port: int | None = 0
    metrics_host: str = "127.0.0.1"
    #: A retry loop (Redis or Kafka unreachable) longer than this makes ``/readyz`` fail.
    ready_retry_s: int = 30
    #: ``text`` (for people) or ``json`` (one object per line, for log shippers).
    log_format: str = "text"
    #: Where ``lb up --monitoring`` serves Prometheus (loopback).
    prometheus_port: int = 29090
    #: Decode + signature engine (``schemas/decode_verify.py``): ``native`` (the
    #: compiled ``lb_native``), ``python`` (fastavro, the reference) or ``auto``
    #: (native when it is installed).
    decoder: str = "auto"
    #: The Bytewax cluster this host belongs to (``LB_ADDRESSES``: ``host:port;...``,
    #: one per process, the same list on every host); empty: ``--processes`` on one host.
    addresses: tuple[str, ...] = ()
    #: Which of ``addresses`` this host runs (``LB_PROCESS_ID``, 0-based).
    process_id: int | None = None
    #: A standby deployment takes over within this many seconds of the active one
    #: stopping or dying (``LB_TAKEOVER_S``); the lease lasts two thirds of it.
    takeover_s: int = 15
    #: What a second deployment of the same topic and namespace does (``LB_STANDBY``):
    #: ``wait`` (a hot standby) or ``refuse`` (exit 2).
    standby: str = "wait"
    #: Who may call the read routes (``LB_API_READS``): ``public`` or ``authenticated``
    #: (a player token or a server API key).
    api_reads: str = "public"
    #: Who may call the write routes (``LB_API_WRITES``): ``public`` or ``authenticated``;
    #: ``None`` (unset): ``authenticated`` when a player-token key or an API key file
    #: is configured, ``public`` otherwise.
    api_writes: str | None = None
    #: Shared secret of HS256 player tokens (``LB_JWT_SECRET``).
    jwt_secret: Secret | None = None
    #: PEM public key (RS256/ES256) or JWKS file of player tokens (``LB_JWT_KEYS``).
    jwt_keys_file: Path | None = None
    #: The ``aud`` and ``iss`` every player token must carry (``LB_JWT_AUDIENCE``,
    #: ``LB_JWT_ISSUER``); both required once player tokens are configured.
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    #: Clock skew allowed when checking ``exp`` and ``nbf`` (``LB_JWT_LEEWAY_S``).
    jwt_leeway_s: int = 30
    #: The file of server API keys, stored hashed (``LB_API_KEYS``).
    api_keys_file: Path | None = None
    #: Origins other than the API's own that browsers may call it from (``LB_API_CORS_ORIGINS``).
    cors_origins: tuple[str, ...] = ()
    #: Rate limits per caller and route class (``LB_RATE_READS``, ``LB_RATE_PUSHES``,
    #: ``LB_RATE_WRITES``): ``N/second``, ``N/minute``, ...; ``None``: no limit.
    rate_reads: str | None = None
    rate_pushes: str | None = None
    rate_writes: str | None = None
    #: A ``lb serve --workers N`` worker's largest request body and page-cache age
    #: (``LB_SERVE_MAX_BODY``, ``LB_SERVE_PAGE_CACHE_MS``: set by ``lb serve`` from
    #: its ``--max-body`` and ``--page-cache-ms``); ``None``: the API's defaults.
    serve_max_body: int | None = None
    serve_page_cache_ms: int | None = None
    #: The file the benchmarks write their sections to (``LB_BENCH_DOC``);
    #: ``None``: the checkout's ``docs/BENCHMARKS.md``.
    bench_doc: Path | None = None

    def __post_init__(self) -> None:
        if not self.profiles_topic:
            object.__setattr__(self, "profiles_topic", profiles_topic_for(self.topic))
        if not self.profiles_dlq_topic:
            object.__setattr__(self, "profiles_dlq_topic", f"{self.profiles_topic}.dlq")
        self._check_services()
        self._check_batching()
        self._check_retries()
        self._check_endpoints()
        self._check_cluster()
        self._check_callers()
        self._check_rates()
        self._check_tools()
        if self.games_file is not None and not self.games_file.is_file():
            raise ConfigError(f"LB_GAMES points at {self.games_file}, which is not a file")

    def _check_services(self) -> None:
        if not self.kafka_bootstrap:
            raise ConfigError("LB_KAFKA_BOOTSTRAP is empty")
        scheme = urlsplit(self.redis_url.reveal()).scheme
        if not scheme:
            raise ConfigError(
                "LB_REDIS_URL has no scheme: write it as redis://HOST:PORT/DB "
                "(rediss:// for TLS, unix:///path/to/socket)"
            )
        if scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(
                f"LB_REDIS_URL must be redis://, rediss:// or unix://, got {scheme!r}"
            )
        if not self.topic or not self.dlq_topic:
            raise ConfigError("LB_TOPIC and LB_DLQ_TOPIC must not be empty")
        if self.topic == self.dlq_topic:
            raise ConfigError("LB_DLQ_TOPIC must differ from LB_TOPIC")
        topics = (self.topic, self.dlq_topic, self.profiles_topic, self.profiles_dlq_topic)
        if not self.profiles_topic or not self.profiles_dlq_topic or len(set(topics)) < 4:
            raise ConfigError(
                "LB_PROFILES_TOPIC and LB_PROFILES_DLQ_TOPIC must be non-empty and differ "
                "from each other, LB_TOPIC and LB_DLQ_TOPIC"
            )
        if not self.namespace or any(c in self.namespace for c in "{}: "):
            raise ConfigError(
                f"LB_NAMESPACE must be non-empty without {{}}: or spaces: {self.namespace!r}"
            )

    def _check_batching(self) -> None:
        if not 1 <= self.batch_ms <= 1000:
            raise ConfigError(f"LB_BATCH_MS must be within 1..1000, got {self.batch_ms}")
        if self.batch_max < 1:
            raise ConfigError(f"LB_BATCH_MAX must be positive, got {self.batch_max}")
        if self.snapshot_interval_s < 1:
            raise ConfigError("LB_SNAPSHOT_INTERVAL_S must be at least 1")
        if self.dedupe_horizon_s < 1:
            raise ConfigError("LB_DEDUPE_HORIZON_S must be at least 1")
        if self.cache_players < 1:
            raise ConfigError("LB_CACHE_PLAYERS must be at least 1")
        if self.replay_memory_members < 0:
            raise ConfigError("LB_REPLAY_MEMORY_MEMBERS must be 0 (no fold) or positive")
        if self.write_max_updates < 0:
            raise ConfigError(
                "LB_WRITE_MAX_UPDATES must be 0 (no bound) or positive, "
                f"got {self.write_max_updates}"
            )
        if self.writes_in_flight < 0:
            raise ConfigError(
                f"LB_WRITES_IN_FLIGHT must be 0 (no pace) or positive, got {self.writes_in_flight}"
            )

    def _check_retries(self) -> None:
        if self.redis_retry_s < 0 or self.kafka_retry_s < 0:
            raise ConfigError("LB_REDIS_RETRY_S and LB_KAFKA_RETRY_S must not be negative")
        if self.heal_check_s < 1:
            raise ConfigError("LB_HEAL_CHECK_S must be at least 1")
        if self.progress_s < 0:
            raise ConfigError(f"LB_PROGRESS_S must not be negative, got {self.progress_s}")
        if self.redis_timeout_s < 1:
            raise ConfigError("LB_REDIS_TIMEOUT_S must be at least 1")
        if self.ready_retry_s < 1:
            raise ConfigError("LB_READY_RETRY_S must be at least 1")

    def _check_endpoints(self) -> None:
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65000:
            raise ConfigError(
                "LB_METRICS_PORT must be a port (0 for any free one) or off, "
                f"got {self.metrics_port}"
            )
        if not 1 <= self.prometheus_port <= 65535:
            raise ConfigError(f"LB_PROMETHEUS_PORT must be a port, got {self.prometheus_port}")
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"LB_LOG_FORMAT must be text or json, got {self.log_format!r}")
        if self.decoder not in ("auto", "native", "python"):
            raise ConfigError(f"LB_DECODER must be auto, native or python, got {self.decoder!r}")

    def _check_cluster(self) -> None:
        if self.process_id is not None and not self.addresses:
            raise ConfigError("LB_PROCESS_ID is set without LB_ADDRESSES (the cluster's hosts)")
        if self.addresses and self.process_id is None:
            raise ConfigError(
                "LB_ADDRESSES is set without LB_PROCESS_ID (which of its addresses this host runs)"
            )
        if self.process_id is not None and not 0 <= self.process_id < len(self.addresses):
            raise ConfigError(
                f"LB_PROCESS_ID {self.process_id} is out of range: LB_ADDRESSES names "
                f"{len(self.addresses)} process(es), so 0..{len(self.addresses) - 1}"
            )
        if not 3 <= self.takeover_s <= 3600:
            raise ConfigError(f"LB_TAKEOVER_S must be within 3..3600, got {self.takeover_s}")
        if self.standby not in ("wait", "refuse"):
            raise ConfigError(f"LB_STANDBY must be wait or refuse, got {self.standby!r}")

    def _check_callers(self) -> None:
        if self.api_reads not in ("public", "authenticated"):
            raise ConfigError(
                f"LB_API_READS must be public or authenticated, got {self.api_reads!r}"
            )
        if self.api_writes not in (None, "public", "authenticated"):
            raise ConfigError(
                f"LB_API_WRITES must be public or authenticated, got {self.api_writes!r}"
            )
        for name, path in (
            ("LB_JWT_KEYS", self.jwt_keys_file),
            ("LB_API_KEYS", self.api_keys_file),
        ):
            if path is not None and not path.is_file():
                raise ConfigError(f"{name} points at {path}, which is not a file")
        if self.player_tokens and not (self.jwt_audience and self.jwt_issuer):
            raise ConfigError(
                "player tokens are configured (LB_JWT_SECRET or LB_JWT_KEYS): "
                "set LB_JWT_AUDIENCE and LB_JWT_ISSUER too, every token is checked against them"
            )
        if self.jwt_secret is not None and len(self.jwt_secret.reveal().encode()) < 32:
            raise ConfigError("LB_JWT_SECRET must be at least 32 bytes (HS256 needs a long key)")
        if not 0 <= self.jwt_leeway_s <= 300:
            raise ConfigError(f"LB_JWT_LEEWAY_S must be within 0..300, got {self.jwt_leeway_s}")
        authenticated = [
            name
            for name, value in (
                ("LB_API_READS", self.api_reads),
                ("LB_API_WRITES", self.api_writes),
            )
            if value == "authenticated"
        ]
        if authenticated and not (self.player_tokens or self.api_keys_file):
            raise ConfigError(
                f"{authenticated[0]}=authenticated, but nobody could authenticate: "
                "configure LB_JWT_SECRET or LB_JWT_KEYS (players) or LB_API_KEYS (servers)"
            )
        for origin in self.cors_origins:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.path:
                raise ConfigError(
                    f"LB_API_CORS_ORIGINS: {origin!r} is not an origin "
                    "(scheme://host[:port], e.g. https://game.example.com)"
                )

    def _check_rates(self) -> None:
        for name, value in (
            ("LB_RATE_READS", self.rate_reads),
            ("LB_RATE_PUSHES", self.rate_pushes),
            ("LB_RATE_WRITES", self.rate_writes),
        ):
            if value is not None and parse_rate(value) is None:
                raise ConfigError(
                    f"{name} must be N/second, N/minute, N/hour or off, got {value!r}"
                )

    def _check_tools(self) -> None:
        if self.serve_page_cache_ms is not None and not 0 <= self.serve_page_cache_ms <= 60_000:
            raise ConfigError(
                f"{PAGE_CACHE_ENV} must be within 0..60000, got {self.serve_page_cache_ms}"
            )
        if self.bench_doc is not None and self.bench_doc.is_dir():
            raise ConfigError(f"LB_BENCH_DOC points at {self.bench_doc}, which is a directory")

    @property
    def player_tokens(self) -> bool:
        """True when player bearer tokens (JWT) can be verified."""
        return self.jwt_secret is not None or self.jwt_keys_file is not None

    @property
    def writes_authenticated(self) -> bool:
        """Whether the write routes require a caller (``LB_API_WRITES``, resolved)."""
        if self.api_writes is not None:
            return self.api_writes == "authenticated"
        return self.player_tokens or self.api_keys_file is not None

    @property
    def uses_dev_keys(self) -> bool:
        """True when the insecure built-in development key is in use."""
        return self.hmac_keys.reveal() == DEV_KEYRING

    def recovery_dir(self, flow: str) -> Path:
        """Bytewax recovery store for one (flow, topic): two topics never share one."""
        safe_topic = "".join(c if c.isalnum() or c in "._-" else "_" for c in self.topic)
        return self.state_dir / "recovery" / flow / safe_topic

    def kafka_config(self) -> dict[str, str]:
        """Librdkafka client properties: bootstrap plus any security passthrough."""
        return {"bootstrap.servers": self.kafka_bootstrap, **dict(self.kafka_extra)}

    def redis_display_url(self) -> str:
        """The Redis URL with any password masked, safe to print or log."""
        parts = urlsplit(self.redis_url.reveal())
        netloc = parts.netloc
        if "@" in netloc:
            creds, host = netloc.rsplit("@", 1)
            user = creds.split(":", 1)[0]
            netloc = f"{user}:***@{host}" if ":" in creds else f"{user}@{host}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate the ``LB_*`` variables (``os.environ`` when not given)."""
        env = os.environ if env is None else env
        state_dir = Path(env.get("LB_STATE_DIR") or _default_state_dir()).resolve()
        recorded = _recorded_ports(state_dir)
        kafka_port = recorded.get("kafka_port", DEFAULT_KAFKA_PORT)
        redis_port = recorded.get("redis_port", DEFAULT_REDIS_PORT)
        topic = env.get("LB_TOPIC") or "score-events"
        profiles = env.get("LB_PROFILES_TOPIC") or ""
        games = env.get("LB_GAMES")
        extra = {
            key[len("LB_KAFKA_X_") :].lower().replace("_", "."): value
            for key, value in env.items()
            if key.startswith("LB_KAFKA_X_")
        }
        password = env.get("LB_REDIS_PASSWORD")
        ca = env.get("LB_REDIS_TLS_CA")
        bench_doc = env.get("LB_BENCH_DOC")
        return cls(
            kafka_bootstrap=env.get("LB_KAFKA_BOOTSTRAP") or f"127.0.0.1:{kafka_port}",
            redis_url=Secret(env.get("LB_REDIS_URL") or f"redis://127.0.0.1:{redis_port}/0"),
            topic=topic,
            dlq_topic=env.get("LB_DLQ_TOPIC") or f"{topic}.dlq",
            profiles_topic=profiles,
            profiles_dlq_topic=env.get("LB_PROFILES_DLQ_TOPIC") or "",
            teams_topic=env.get("LB_TEAMS_TOPIC") or "team-membership",
            hmac_keys=Secret(env.get("LB_HMAC_KEYS") or DEV_KEYRING),
            games_file=Path(games) if games else None,
            state_dir=state_dir,
            cache_dir=Path(
                env.get("LB_CACHE_DIR") or Path.home() / ".cache" / "realtime-leaderboard"
            ).resolve(),
            kafka_extra=extra,
            redis_username=env.get("LB_REDIS_USERNAME") or None,
            redis_password=Secret(password) if password else None,
            redis_tls_ca=Path(ca) if ca else None,
            redis_cluster=(env.get("LB_REDIS_CLUSTER") or "0").lower() in ("1", "true", "yes"),
            batch_ms=_int(env, "LB_BATCH_MS", 50),
            batch_max=_int(env, "LB_BATCH_MAX", 5000),
            snapshot_interval_s=_int(env, "LB_SNAPSHOT_INTERVAL_S", 5),
            dedupe_horizon_s=_int(env, "LB_DEDUPE_HORIZON_S", 300),
            cache_players=_int(env, "LB_CACHE_PLAYERS", 2_000_000),
            replay_memory_members=_int(env, "LB_REPLAY_MEMORY_MEMBERS", 30_000_000),
            write_max_updates=_int(env, "LB_WRITE_MAX_UPDATES", MAX_UPDATES),
            writes_in_flight=_int(env, "LB_WRITES_IN_FLIGHT", 1),
            redis_retry_s=_int(env, "LB_REDIS_RETRY_S", 300),
            redis_timeout_s=_int(env, "LB_REDIS_TIMEOUT_S", 10),
            kafka_retry_s=_int(env, "LB_KAFKA_RETRY_S", 300),
            heal_check_s=_int(env, "LB_HEAL_CHECK_S", 5),
            namespace=env.get("LB_NAMESPACE") or "lb",
            progress_s=_int(env, "LB_PROGRESS_S", 10),
            metrics_port=_port_or_off(env, "LB_METRICS_PORT"),
            metrics_host=env.get("LB_METRICS_HOST") or "127.0.0.1",
            ready_retry_s=_int(env, "LB_READY_RETRY_S", 30),
            log_format=(env.get("LB_LOG_FORMAT") or "text").lower(),
            prometheus_port=_int(env, "LB_PROMETHEUS_PORT", 29090),
            decoder=(env.get("LB_DECODER") or "auto").lower(),
            addresses=parse_addresses(env.get("LB_ADDRESSES") or "", "LB_ADDRESSES"),
            process_id=_optional_int(env, "LB_PROCESS_ID"),
            takeover_s=_int(env, "LB_TAKEOVER_S", 15),
            standby=(env.get("LB_STANDBY") or "wait").lower(),
            serve_max_body=_optional_int(env, MAX_BODY_ENV),
            serve_page_cache_ms=_optional_int(env, PAGE_CACHE_ENV),
            bench_doc=Path(bench_doc) if bench_doc else None,
            **_caller_settings(env),
        )


def profiles_topic_for(topic: str) -> str:
    """The default profiles topic beside a score topic.

    ``player-profiles`` beside the default ``score-events``; ``<topic>.profiles``
    beside any other, so two pipelines on two score topics never share profiles.
    """
    return "player-profiles" if topic == "score-events" else f"{topic}.profiles"


def _caller_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The API's caller settings: identities, CORS and rate limits."""
    secret = env.get("LB_JWT_SECRET")
    jwt_keys = env.get("LB_JWT_KEYS")
    api_keys = env.get("LB_API_KEYS")
    origins = env.get("LB_API_CORS_ORIGINS") or ""
    return {
        "api_reads": (env.get("LB_API_READS") or "public").lower(),
        "api_writes": (env.get("LB_API_WRITES") or "").lower() or None,
        "jwt_secret": Secret(secret) if secret else None,
        "jwt_keys_file": Path(jwt_keys) if jwt_keys else None,
        "jwt_audience": env.get("LB_JWT_AUDIENCE") or None,
        "jwt_issuer": env.get("LB_JWT_ISSUER") or None,
        "jwt_leeway_s": _int(env, "LB_JWT_LEEWAY_S", 30),
        "api_keys_file": Path(api_keys) if api_keys else None,
        "cors_origins": tuple(o.strip().rstrip("/") for o in origins.split(",") if o.strip()),
        "rate_reads": _rate(env, "LB_RATE_READS"),
        "rate_pushes": _rate(env, "LB_RATE_PUSHES"),
        "rate_writes": _rate(env, "LB_RATE_WRITES"),
    }


def _rate(env: Mapping[str, str], name: str) -> str | None:
    raw = (env.get(name) or "").strip()
    return None if raw.lower() in ("", "off", "none") else raw


#: ``N/second``, ``N per minute``, ``N/5 minutes``: the rate strings the limits accept.
_RATE = re.compile(
    r"^\s*([1-9][0-9]{0,8})\s*(?:/|per)\s*([1-9][0-9]{0,5})?\s*(second|minute|hour|day)s?\s*$"
)
_UNIT_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def parse_rate(text: str) -> tuple[int, int] | None:
    """``(amount, period_s)`` of a rate (``100/second``, ``20/5 minutes``); None if not one."""
    match = _RATE.match(text.lower())
    if match is None:
        return None
    amount, multiple, unit = match.groups()
    return int(amount), int(multiple or 1) * _UNIT_S[unit]


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from exc


def _optional_int(env: Mapping[str, str], name: str) -> int | None:
    raw = (env.get(name) or "").strip()
    return None if raw == "" else _int({name: raw}, name, 0)


def parse_addresses(text: str, name: str = "--addresses") -> tuple[str, ...]:
    """``host:port;host:port;...`` (Bytewax's ``-a``) as a tuple; ``""`` is none.

    Each entry needs a host and a port within 1..65535 (an IPv6 host in
    brackets: ``[::1]:2101``); no address may appear twice.
    """
    if not text.strip():
        return ()
    out: list[str] = []
    for raw in text.split(";"):
        entry = raw.strip()
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ConfigError(
                f"{name}: {entry!r} is not host:port (e.g. '10.0.0.1:2101;10.0.0.2:2101')"
            )
        if any(c.isspace() for c in host) or (host.count(":") and not host.startswith("[")):
            raise ConfigError(f"{name}: {entry!r} has a malformed host (IPv6 goes in [brackets])")
        if entry in out:
            raise ConfigError(f"{name}: {entry!r} appears twice")
        out.append(entry)
    return tuple(out)


def _port_or_off(env: Mapping[str, str], name: str) -> int | None:
    raw = (env.get(name) or "0").strip().lower()
    if raw in ("off", "none", "no", "false"):
        return None
    return _int({name: raw}, name, 0)


def child_environment(overrides: Mapping[str, str]) -> dict[str, str]:
    """The current environment plus ``overrides``, for starting ``lb``/Bytewax children.

    Lives here so that the settings module stays the one place that reads
    ``os.environ``.
    """
    return {**os.environ, **overrides}


def hand_to_spawned_children(values: Mapping[str, str]) -> None:
    """Add ``values`` to this process's environment, for children that inherit it.

    For children started by a library that takes no environment of its own:
    uvicorn's workers (``lb serve --workers N``) are spawned by
    ``multiprocessing``, which gives them this process's environment. Lives
    here so that the settings module stays the one place that touches
    ``os.environ``.
    """
    os.environ.update(values)
