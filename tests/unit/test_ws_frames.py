"""Shared WebSocket frames: the bytes the library would write, and uvicorn's back-pressure kept.

The protocol under test is uvicorn's real one (with :mod:`api.ws_frames`'
extension) driven through its asyncio.Protocol methods, as the event loop
drives it; the transport records what it is given.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.server import ServerState
from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, Side, State

from api.ws_frames import EXTENSION, FrameWriter, SharedFrameProtocol, text_frame

PAGE = '{"type":"top","id":"1-0","window":"alltime","entries":[],"changes":[]}'
HANDSHAKE = (
    b"GET /live HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


@pytest.mark.parametrize("size", [0, 125, 126, 65_535, 65_536])
def test_a_shared_frame_is_what_the_library_sends_for_the_text(size: int) -> None:
    text = "é" * (size // 2) + "x" * (size % 2)
    server = Protocol(Side.SERVER, state=State.OPEN)
    server.send_text(text.encode())
    assert text_frame(text) == b"".join(server.data_to_send())
    client = Protocol(Side.CLIENT, state=State.OPEN)
    client.receive_data(text_frame(text))
    [frame] = client.events_received()
    assert isinstance(frame, Frame) and frame.opcode is Opcode.TEXT
    assert bytes(frame.data).decode() == text


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name in ("sockname", "peername") else default

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _connect(
    deflate: bool = False, request_extra: bytes = b""
) -> tuple[SharedFrameProtocol, Transport, FrameWriter | None]:
    """A protocol whose app accepts and hands back the writer it was offered."""
    offered: asyncio.Future[FrameWriter | None] = asyncio.get_running_loop().create_future()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        offered.set_result(scope["extensions"].get(EXTENSION))
        await asyncio.Event().wait()  # the connection stays open until the test ends

    config = Config(app, ws=SharedFrameProtocol, ws_per_message_deflate=deflate, lifespan="off")
    config.load()
    protocol = SharedFrameProtocol(config, ServerState(), {})
    transport = Transport()
    protocol.connection_made(transport)
    protocol.data_received(HANDSHAKE + request_extra + b"\r\n")
    writer = await asyncio.wait_for(offered, 5)
    assert transport.written[0].startswith(b"HTTP/1.1 101")
    return protocol, transport, writer


def test_frames_go_out_while_the_socket_drains_and_wait_while_it_does_not() -> None:
    async def scenario() -> None:
        protocol, transport, writer = await _connect()
        assert writer is not None
        frame = text_frame(PAGE)
        assert writer.try_write(frame) and transport.written[-1] == frame

        protocol.pause_writing()  # the transport's buffer passed its high-water mark
        assert not writer.try_write(frame)
        sent = asyncio.ensure_future(writer.send(frame))
        await asyncio.sleep(0.01)
        assert not sent.done() and transport.written[-1:] == [frame]  # nothing more written
        protocol.resume_writing()
        await asyncio.wait_for(sent, 5)
        assert transport.written[-2:] == [frame, frame]

        protocol.connection_lost(None)
        with pytest.raises(OSError):
            writer.try_write(frame)

    asyncio.run(scenario())


def test_a_writer_waiting_for_a_lost_connection_is_told() -> None:
    async def scenario() -> None:
        protocol, _, writer = await _connect()
        assert writer is not None
        protocol.pause_writing()
        sent = asyncio.ensure_future(writer.send(text_frame(PAGE)))
        await asyncio.sleep(0.01)
        protocol.connection_lost(ConnectionResetError())
        with pytest.raises(OSError):
            await asyncio.wait_for(sent, 5)

    asyncio.run(scenario())


def test_a_compressed_connection_is_offered_no_shared_frames() -> None:
    async def scenario() -> None:
        protocol, _, writer = await _connect(
            deflate=True, request_extra=b"Sec-WebSocket-Extensions: permessage-deflate\r\n"
        )
        assert protocol.conn.extensions and writer is None
        protocol.connection_lost(None)

    asyncio.run(scenario())
