"""One round trip of many commands on a standalone Redis, packed by hiredis.

redis-py's pipeline is the right tool almost everywhere, but on the job's hot
path two of its costs showed in the profile: every argument of every command
goes through a Python-level type check before hiredis packs it (the board
writes carry ~25 arguments per event), and a pipeline holding a script asks
``SCRIPT EXISTS`` in an extra round trip on every ``execute``. Here hiredis
(the protocol library redis-py itself uses) packs each command in one C call,
the commands go out in one write on a pooled connection, and the replies are
read back in order with redis-py's own parser; a script is loaded once and
again only when Redis answers ``NOSCRIPT`` (after a restart or a
``SCRIPT FLUSH``).

Error replies are returned in place (as :class:`redis.ResponseError`), never
raised half-way, so the connection stays in step with its replies; a dropped
connection raises as redis-py's would and is retried by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hiredis
import redis
from redis.exceptions import NoScriptError, ResponseError

Command = Sequence[str | bytes | int | float]


class RawPipeline:
    """Sends packed commands on one pooled connection of ``client``; replies in order."""

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._shas: dict[str, str] = {}

    def run(self, commands: Sequence[Command]) -> list[Any]:
        """Every command's reply, in order (an error reply as a ``ResponseError``)."""
        if not commands:
            return []
        pack = hiredis.pack_command
        packed = [pack(tuple(command)) for command in commands]  # type: ignore[arg-type]
        conn = self._pool.get_connection()
        try:
            conn.send_packed_command(packed)  # type: ignore[no-untyped-call]
            replies: list[Any] = []
            for _ in packed:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            # A half-read reply stream cannot be reused: drop the connection.
            conn.disconnect()  # type: ignore[no-untyped-call]
            raise
        finally:
            self._pool.release(conn)
        return replies

    def sha(self, script: str) -> str:
        """The script's SHA1, loading it into Redis the first time."""
        sha = self._shas.get(script)
        if sha is None:
            (reply,) = self.run([("SCRIPT", "LOAD", script)])
            if isinstance(reply, Exception):
                raise reply
            sha = self._shas[script] = reply.decode() if isinstance(reply, bytes) else str(reply)
        return sha

    def eval_many(
        self, script: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]
    ) -> list[Any]:
        """``EVALSHA`` of ``script`` once per ``(keys, args)``; loads it again after NOSCRIPT.

        Re-running every call after a NOSCRIPT is only safe for a script that is
        idempotent per call, as the board writes are (their watermark guard).
        """
        for _ in range(2):
            sha = self.sha(script)
            replies = self.run([("EVALSHA", sha, len(keys), *keys, *args) for keys, args in calls])
            if not any(isinstance(reply, NoScriptError) for reply in replies):
                return replies
            self._shas.pop(script, None)
        return replies
