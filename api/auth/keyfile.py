"""Server API keys: a file of hashed keys, re-read when it changes.

The file (``LB_API_KEYS``) holds one key a line, ``NAME sha256:HEX``: the name
says whose key it is (it labels the caller in rate limits and logs) and HEX is
the SHA-256 of the key. The keys themselves are never stored: ``lb serve
--new-api-key NAME`` prints a fresh random key and its line. ``#`` starts a
comment; names are unique. Several keys are live at once, so a key is rotated
by adding the new line, moving the servers to the new key, and deleting the old
line. The file is checked for changes (modification time, size, inode) at most
once per :data:`RELOAD_S` by each API process, so an edit takes effect on every
worker within about a second, without a restart. A file that no longer parses
keeps the last good keys in force, and the error is logged.

A key is 32 random bytes (``lbk_`` + 43 URL-safe base64 characters): far too
much entropy to guess, so one SHA-256 suffices (no slow hash is needed, unlike
a password), and the lookup by hash compares no secret byte by byte.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from domain.errors import ConfigError

log = logging.getLogger("lb.api")

#: Every key starts with this, which also tells it apart from a JWT (``eyJ...``).
KEY_PREFIX = "lbk_"
#: Seconds between two checks of the key file for changes.
RELOAD_S = 1.0
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_HASH = re.compile(r"^sha256:([0-9a-f]{64})$")
T = TypeVar("T")


def key_hash(key: str) -> str:
    """The stored form of a key: SHA-256, hex."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh random API key."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_line(name: str, key: str) -> str:
    """The key file's line for ``key`` under ``name``."""
    if not _NAME.match(name):
        raise ConfigError(f"an API key name is 1..64 of A-Z a-z 0-9 . _ -, got {name!r}")
    return f"{name} sha256:{key_hash(key)}"


def parse_key_file(text: str, where: str = "LB_API_KEYS") -> dict[str, str]:
    """``{sha256 hex: name}`` from the key file's text; ConfigError naming the bad line."""
    keys: dict[str, str] = {}
    names: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        match = _HASH.match(fields[1]) if len(fields) == 2 else None
        if match is None or not _NAME.match(fields[0]):
            raise ConfigError(
                f"{where} line {number}: expected 'NAME sha256:<64 hex digits>' "
                "(lb serve --new-api-key NAME prints one)"
            )
        name, digest = fields[0], match.group(1)
        if name in names:
            raise ConfigError(f"{where} line {number}: the name {name!r} appears twice")
        if digest in keys:
            raise ConfigError(f"{where} line {number}: the same key appears twice")
        names.add(name)
        keys[digest] = name
    return keys


@dataclass(frozen=True)
class _Version:
    mtime_ns: int
    size: int
    inode: int


def _version(path: Path) -> _Version | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _Version(st.st_mtime_ns, st.st_size, st.st_ino)


class WatchedFile(Generic[T]):
    """A file parsed into a value, parsed again when it changes (checked every ``every_s``).

    ``clock`` is monotonic seconds. A file that cannot be read or parsed any
    more keeps the last good value; a file unreadable or invalid at start is
    a ConfigError.
    """

    def __init__(
        self,
        path: Path,
        parse: Callable[[str], T],
        *,
        every_s: float = RELOAD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._parse = parse
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._version = _version(path)
        try:
            self._value = parse(path.read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
        self._checked = clock()
        self.generation = 0

    def current(self) -> T:
        """The value, re-read first when the check is due and the file changed."""
        now = self._clock()
        if now - self._checked < self._every_s:
            return self._value
        with self._lock:
            self._checked = now
            version = _version(self.path)
            if version is not None and version != self._version:
                self._reload(version)
        return self._value

    def _reload(self, version: _Version) -> None:
        try:
            value = self._parse(self.path.read_text())
        except (OSError, ConfigError) as exc:
            log.error("keeping the previous contents of %s: %s", self.path, exc)
            return
        self._version = version
        self._value = value
        self.generation += 1
        log.info("re-read %s", self.path)


class ApiKeys:
    """The live server keys of one key file."""

    def __init__(
        self, path: Path, *, every_s: float = RELOAD_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._file = WatchedFile(path, parse_key_file, every_s=every_s, clock=clock)

    def name_of(self, key: str) -> str | None:
        """The name a presented key is filed under; None if it is not a live key."""
        return self._file.current().get(key_hash(key))
