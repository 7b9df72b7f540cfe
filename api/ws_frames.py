"""WebSocket pushes written as one shared frame, below the per-subscriber ASGI send.

Every subscriber of one watch (game, window, top N) is sent the very same
page, so its WebSocket frame (the ``websockets`` library's own serialisation:
a server's frames are unmasked, and permessage-deflate is off) is the same
bytes for all of them. :class:`SharedFrameProtocol` is uvicorn's Sans-I/O
``websockets`` protocol plus one ASGI scope extension, :data:`EXTENSION`,
through which the push endpoint writes those bytes to the connection's
transport. Per subscriber that skips the ASGI message, the per-send framing
and a deadline timer: the costs the fan-out of a page paid a thousand times
(docs/BENCHMARKS.md, HTTP section). Everything else (handshake, pings,
close, receive) is uvicorn's, unchanged.

Back-pressure is uvicorn's too: the transport pauses the protocol above its
high-water mark, and then :meth:`FrameWriter.try_write` refuses, so the
caller waits for the socket with a deadline (:meth:`FrameWriter.send`) as
it would for ``websocket.send``.
"""

from __future__ import annotations

from typing import Any, cast

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State

#: The scope extension offering a connection's :class:`FrameWriter` (absent: use ``send``).
EXTENSION = "lb.websocket.frames"


def text_frame(text: str) -> bytes:
    """A complete server-to-client text frame carrying ``text``, as ``websockets`` writes it."""
    return Frame(Opcode.TEXT, text.encode()).serialize(mask=False)


class FrameWriter:
    """Writes frames made by :func:`text_frame` to one open WebSocket connection."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: SharedFrameProtocol) -> None:
        self._protocol = protocol

    def try_write(self, frame: bytes) -> bool:
        """Write ``frame`` now; False (nothing written) when the socket is not draining.

        Raises ClientDisconnected (an OSError) once the connection is closing,
        as uvicorn's own send does.
        """
        protocol = self._protocol
        if (
            protocol.disconnected
            or protocol.close_sent
            or protocol.conn.state is not State.OPEN
            or protocol.transport.is_closing()
        ):
            raise ClientDisconnected()
        if not protocol.writable.is_set():
            return False
        protocol.transport.write(frame)
        return True

    async def send(self, frame: bytes) -> None:
        """Write ``frame`` once the socket drains (the caller bounds the wait)."""
        while not self.try_write(frame):
            await self._protocol.writable.wait()


class SharedFrameProtocol(WebSocketsSansIOProtocol):
    """uvicorn's ``websockets-sansio`` protocol, also offering :data:`EXTENSION`.

    Offered only on a connection without extensions (a compressed connection
    needs its own frames) whose handshake is going ahead.
    """

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        if self.close_sent or self.conn.extensions:
            return  # refused (no scope was made), or frames are per connection
        extensions = cast(dict[str, Any], self.scope["extensions"])
        extensions[EXTENSION] = FrameWriter(self)
