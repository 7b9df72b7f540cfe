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

from adapters.redis import Script

Command = Sequence[str | bytes | int | float]
#: One script call: its keys and its arguments.
Call = tuple[Sequence[str], Sequence[Any]]


class RawPipeline:
    """Sends packed commands on one pooled connection of ``client``; replies in order.

    :meth:`send` lets commands leave now and their replies wait: the next
    :meth:`run` sends its own commands on the same connection, behind them,
    and reads every reply, so Redis applies the earlier commands while the
    caller does other work, and before anything sent later.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._loaded: set[str] = set()
        self._held: Any = None
        self._unread = 0

    def send(self, commands: Sequence[Command]) -> None:
        """Send ``commands`` now; their replies come first in the next :meth:`run`."""
        if commands:
            self._exchange(commands, read=False)

    def run(self, commands: Sequence[Command]) -> list[Any]:
        """The replies to what :meth:`send` left unread, then to ``commands``, in order.

        An error reply is returned in place as a ``ResponseError``.
        """
        return self._exchange(commands, read=True)

    def _exchange(self, commands: Sequence[Command], read: bool) -> list[Any]:
        pack = hiredis.pack_command
        packed = [pack(tuple(command)) for command in commands]  # type: ignore[arg-type]
        conn = self._held
        if conn is None:
            if not packed:
                return []
            conn = self._held = self._pool.get_connection()
        try:
            if packed:
                # No health check (a PING) while replies are unread: it would
                # read one of them as its PONG.
                conn.send_packed_command(packed, check_health=not self._unread)
            self._unread += len(packed)
            if not read:
                return []
            replies: list[Any] = []
            while self._unread:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
                self._unread -= 1
        except BaseException:
            # A half-read reply stream cannot be reused, and what was sent on it
            # is in doubt: drop the connection; the caller sends again.
            conn.disconnect()
            self._release()
            raise
        self._release()
        return replies

    def _release(self) -> None:
        if self._held is not None:
            self._pool.release(self._held)
        self._held = None
        self._unread = 0

    def sha(self, script: Script) -> str:
        """The script's SHA1, loading it into Redis the first time."""
        if script.sha not in self._loaded:
            (reply,) = self.run([("SCRIPT", "LOAD", script.source)])
            if isinstance(reply, Exception):
                raise reply
            self._loaded.add(script.sha)
        return script.sha

    def forget(self, script: Script) -> None:
        """Redis answered NOSCRIPT: load ``script`` again before its next use."""
        self._loaded.discard(script.sha)

    def evals(self, script: Script, calls: Sequence[Call]) -> list[Command]:
        """``EVALSHA`` commands of ``script``, one per ``(keys, args)`` (loading it if needed)."""
        sha = self.sha(script)
        return [("EVALSHA", sha, len(keys), *keys, *args) for keys, args in calls]

    def eval_many(self, script: Script, calls: Sequence[Call]) -> list[Any]:
        """``EVALSHA`` of ``script`` once per ``(keys, args)``; loads it again after NOSCRIPT.

        Re-running every call after a NOSCRIPT is only safe for a script that is
        idempotent per call, as the board writes are (their watermark guard).
        """
        replies: list[Any] = []
        for _ in range(2):
            replies = self.run(self.evals(script, calls))
            if not any(isinstance(reply, NoScriptError) for reply in replies):
                return replies
            self.forget(script)
        return replies
