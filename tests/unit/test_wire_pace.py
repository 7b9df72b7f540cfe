"""``sinks.wire.RawPipeline``'s pace against a fake connection: bound, order, no loss.

The real-Redis side (what another connection sees while calls wait) is in
``tests/integration/test_wire.py``.
"""

from __future__ import annotations

from collections import deque

import hiredis
from hypothesis import given
from hypothesis import strategies as st

from sinks.wire import JOIN_BELOW, RawPipeline, writes


class FakeConnection:
    """Answers each command with its packed bytes; tracks the script calls out at once.

    Like redis-py's connection, each buffer ``send_packed_command`` is given is
    one socket write (a ``sendall``); a buffer may hold several commands.
    """

    def __init__(self) -> None:
        self.unanswered: deque[bytes] = deque()
        self.most_writes_out = 0
        self.sends = 0
        self.commands = 0

    def send_packed_command(self, packed: list[bytes], check_health: bool) -> None:
        assert not check_health or not self.unanswered, "a health check behind unread replies"
        for buffer in packed:
            self.sends += 1
            commands = _split(buffer)
            self.commands += len(commands)
            self.unanswered.extend(commands)
        counted = sum(_counts(p) for p in self.unanswered)
        self.most_writes_out = max(self.most_writes_out, counted)

    def read_response(self) -> bytes:
        return self.unanswered.popleft()

    def disconnect(self) -> None:
        self.unanswered.clear()


def _split(buffer: bytes) -> list[bytes]:
    """The commands a socket write holds, each packed again on its own."""
    reader = hiredis.Reader()
    reader.feed(buffer)
    out: list[bytes] = []
    while (parts := reader.gets()) is not False:
        out.append(hiredis.pack_command(tuple(parts)))
    return out


def _counts(packed: bytes) -> bool:
    """A script call or a command of over 64 arguments (read from the packed RESP)."""
    arguments = int(packed[1 : packed.index(b"\r\n")])
    return b"EVALSHA" in packed[:20] or arguments > 64


class FakePool:
    def __init__(self) -> None:
        self.conn = FakeConnection()

    def get_connection(self) -> FakeConnection:
        return self.conn

    def release(self, conn: FakeConnection) -> None:
        assert conn is self.conn


class FakeClient:
    def __init__(self) -> None:
        self.connection_pool = FakePool()


def _command(i: int, kind: int) -> tuple[str, ...]:
    """0: a short read, 1: a script call, 2: a long lookup (paced like a call)."""
    if kind == 1:
        return ("EVALSHA", "sha", "1", f"k{i}")
    if kind == 2:
        return ("ZMSCORE", f"k{i}", *(f"p{n}" for n in range(70)))
    return ("GET", f"k{i}")


@given(
    pace=st.integers(min_value=0, max_value=3),
    rounds=st.lists(
        st.tuples(st.lists(st.integers(0, 2), max_size=8), st.lists(st.integers(0, 2), max_size=8)),
        min_size=1,
        max_size=5,
    ),
)
def test_paced_calls_never_exceed_the_pace_and_every_reply_comes_back_in_order(
    pace: int, rounds: list[tuple[list[int], list[int]]]
) -> None:
    client = FakeClient()
    wire = RawPipeline(client, writes_in_flight=pace)
    n = 0
    for sent, ran in rounds:
        first = [_command(n + i, w) for i, w in enumerate(sent)]
        n += len(first)
        then = [_command(n + i, w) for i, w in enumerate(ran)]
        n += len(then)
        wire.send(first)
        # Everything sent has left (nothing waits for a later call); at most
        # the pace's last calls are unanswered.
        assert client.connection_pool.conn.commands == n - len(then)
        replies = wire.run(then)
        assert replies == [hiredis.pack_command(c) for c in first + then]
    conn = client.connection_pool.conn
    assert not conn.unanswered
    if pace:
        assert conn.most_writes_out <= pace
    else:  # unpaced: each send and each run is one socket write
        assert conn.sends <= 2 * len(rounds)


def test_a_paced_round_of_one_call_after_another_sends_each_behind_the_last_reply() -> None:
    client = FakeClient()
    conn = client.connection_pool.conn
    wire = RawPipeline(client, writes_in_flight=1)
    wire.send([_command(i, 1) for i in range(4)])
    # one call at a time, each behind the last reply; the last call is still out
    assert (conn.sends, conn.commands, len(conn.unanswered)) == (4, 4, 1)
    replies = wire.run([_command(9, 0)])
    assert replies == [hiredis.pack_command(_command(i, 1)) for i in range(4)] + [
        hiredis.pack_command(_command(9, 0))
    ]
    # the read left behind the last call, in one more socket write
    assert conn.sends == 5


def test_short_commands_share_a_socket_write_and_a_long_one_goes_alone_uncopied() -> None:
    short = [hiredis.pack_command(("GET", f"k{i}")) for i in range(3)]
    long = hiredis.pack_command(("ZADD", "board", *["1", "m" * 100] * 700))
    assert len(long) >= JOIN_BELOW
    out = writes([short[0], short[1], long, short[2]])
    assert out == [short[0] + short[1], long, short[2]]
    assert out[1] is long
    assert writes([short[0]]) == [short[0]]
