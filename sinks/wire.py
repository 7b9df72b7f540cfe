"""One round trip of many commands on a standalone Redis, each packed in one compiled call.

redis-py's pipeline is the right tool almost everywhere, but on the job's hot
path two of its costs showed in the profile: every argument of every command
goes through a Python-level type check before hiredis packs it (the board
writes carry ~25 arguments per event), and a pipeline holding a script asks
``SCRIPT EXISTS`` in an extra round trip on every ``execute``. Here each command
is packed in one compiled call (``lb_native.pack_command`` when it is built:
the same bytes for about a third of the CPU per word of hiredis, the protocol
library redis-py itself uses and the packer without it), the commands go out
in one socket write (each long one in a write of its own)
on a pooled connection, and the replies are read back in order with redis-py's
own parser; a script is loaded once and again only when Redis answers
``NOSCRIPT`` (after a restart or a ``SCRIPT FLUSH``).

A pace (``writes_in_flight``) bounds how many script calls (``EVALSHA``)
and long commands (over :data:`LONG_COMMAND` arguments: a batch's
``ZMSCORE``/``HMGET`` lookups) one connection has in Redis at once; the rest
wait here and leave as replies come back, with the commands behind them.
:meth:`RawPipeline.send` returns only once every command it was given has
left (reading, and keeping for the next :meth:`RawPipeline.run`, the replies
it must wait for), so what a sink sends reaches Redis now, even if nothing
more is sent for a while; at most the pace's last calls are still unanswered.
Redis reads up to 16 KB of a connection's pipeline in each pass of its event
loop and runs every command in it before it serves another connection, so a
pipeline of group writes holds every reader of the node for several writes;
paced, a reader waits for at most one write per job connection.

Error replies are returned in place (as :class:`redis.ResponseError`), never
raised half-way, so the connection stays in step with its replies; a dropped
connection raises as redis-py's would and is retried by the caller.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import hiredis
import redis
from redis.exceptions import NoScriptError, ResponseError

from adapters.redis import Script
from schemas.decode_verify import native_module

#: A command's words.
Words = Sequence[str | bytes | int | float]
#: A command: its words, or packed already (RESP bytes: a long command for the pace).
Command = Words | bytes
#: One script call: its keys and its arguments.
Call = tuple[Sequence[str], Sequence[Any]]
#: Packs a command's words as RESP bytes: ``lb_native``'s when it is built (the
#: same bytes and refusals as hiredis', tests/unit/test_native_resp.py), else hiredis'.
PACK: Callable[[tuple[Any, ...]], bytes] = getattr(
    native_module(), "pack_command", hiredis.pack_command
)
#: A command with more arguments than this counts against the pace like a script
#: call; shorter ones (a ``GET``, the progress ``HSET``) ride along unpaced.
LONG_COMMAND = 64

#: A packed command this long goes out as it is; shorter ones are joined into
#: one buffer first. redis-py's ``send_packed_command`` makes one ``sendall``
#: per buffer it is given, so a round of 5,000 short reads (a replayed
#: history's dedupe lookups) would otherwise cost 5,000 system calls in the
#: job and as many socket reads in Redis; a long one (a replay load's
#: ``ZADD`` of thousands of members) is not worth copying.
JOIN_BELOW = 64 * 1024


def paced(command: Words) -> bool:
    """Whether ``command`` counts against the pace: a script call or a long command."""
    return command[0] == "EVALSHA" or len(command) > LONG_COMMAND


def writes(ready: list[bytes]) -> list[bytes]:
    """``ready``'s packed commands as socket writes: short ones joined (:data:`JOIN_BELOW`)."""
    if len(ready) == 1:
        return ready
    out: list[bytes] = []
    run: list[bytes] = []
    for packed in ready:
        if len(packed) < JOIN_BELOW:
            run.append(packed)
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(packed)
    if run:
        out.append(b"".join(run))
    return out


class RawPipeline:
    """Sends packed commands on one pooled connection of ``client``; replies in order.

    :meth:`send` lets commands leave now and their replies wait: the next
    :meth:`run` sends its own commands on the same connection, behind them,
    and reads every reply, so Redis applies the earlier commands while the
    caller does other work, and before anything sent later. With
    ``writes_in_flight`` > 0 at most that many script calls and long commands
    (:func:`paced`) are out at once (see the module's docstring); 0 sends
    everything at once.
    """

    def __init__(self, client: redis.Redis, writes_in_flight: int = 0) -> None:
        self._pool = client.connection_pool
        self._pace = writes_in_flight
        self._loaded: set[str] = set()
        self._held: Any = None
        #: Packed commands not sent yet (paced), each with whether it counts (paced()).
        self._backlog: deque[tuple[bytes, bool]] = deque()
        #: Per command sent and not answered yet: whether it counts against the pace.
        self._out: deque[bool] = deque()
        self._paced_out = 0
        #: Replies :meth:`send` read to let the backlog go, for the next :meth:`run`.
        self._early: list[Any] = []

    def send(self, commands: Sequence[Command]) -> None:
        """Send every one of ``commands``; their replies come first in the next :meth:`run`.

        Paced, this waits for as many replies as it takes to send the last of
        them, so at most the pace's last calls are still running on return.
        """
        if commands:
            self._exchange(commands, read=False)

    def run(self, commands: Sequence[Command]) -> list[Any]:
        """The replies to what :meth:`send` left unread, then to ``commands``, in order.

        An error reply is returned in place as a ``ResponseError``.
        """
        return self._exchange(commands, read=True)

    def _exchange(self, commands: Sequence[Command], read: bool) -> list[Any]:
        pack = PACK
        for command in commands:
            if isinstance(command, bytes):  # packed by the caller (a replay load's ZADD)
                self._backlog.append((command, True))
            else:
                self._backlog.append((pack(tuple(command)), paced(command)))
        conn = self._held
        if conn is None:
            if not self._backlog:
                return []
            conn = self._held = self._pool.get_connection()
        try:
            self._pump(conn)
            if not read:
                while self._backlog:  # everything leaves now, however long the round
                    self._early.append(self._read_one(conn))
                return []
            replies = self._early
            self._early = []
            while self._out:
                replies.append(self._read_one(conn))
        except BaseException:
            # A half-read reply stream cannot be reused, and what was sent on it
            # is in doubt: drop the connection; the caller sends again.
            conn.disconnect()
            self._release()
            raise
        self._release()
        return replies

    def _read_one(self, conn: Any) -> Any:
        """The next reply (an error reply in place); sends what its slot in the pace lets go."""
        try:
            reply = conn.read_response()
        except ResponseError as exc:
            reply = exc
        if self._out.popleft():
            self._paced_out -= 1
            self._pump(conn)
        return reply

    def _pump(self, conn: Any) -> None:
        """Send the backlog's head up to the pace, its short commands in one socket write."""
        ready: list[bytes] = []
        backlog, out = self._backlog, self._out
        while backlog:
            packed, counts = backlog[0]
            if counts and self._pace and self._paced_out >= self._pace:
                break
            backlog.popleft()
            ready.append(packed)
            out.append(counts)
            self._paced_out += counts
        if ready:
            # No health check (a PING) while replies are unread: it would
            # read one of them as its PONG.
            conn.send_packed_command(writes(ready), check_health=len(out) == len(ready))

    def _release(self) -> None:
        if self._held is not None:
            self._pool.release(self._held)
        self._held = None
        self._backlog.clear()
        self._out.clear()
        self._paced_out = 0
        self._early = []

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
