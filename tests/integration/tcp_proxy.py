"""A TCP proxy on a free loopback port that can cut every connection through it.

What a client sees when its network drops: the connections end, and new ones
are refused until :meth:`TcpProxy.restore`. The server behind it stays up.
The first line each client sent (an HTTP request line, a WebSocket handshake)
is kept in :attr:`TcpProxy.first_lines`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from urllib.parse import urlsplit


class TcpProxy:
    """Forwards ``127.0.0.1:<free port>`` to the host and port of ``target`` (a base URL)."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        assert parts.hostname and parts.port, target
        self._target = (parts.hostname, parts.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.first_lines: list[str] = []
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._refusing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """End every connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._refusing = True
            sockets, self._open = self._open, set()
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._refusing = False

    def close(self) -> None:
        _close(self._listener)
        self.cut()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                refusing = self._refusing
            if refusing:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=10)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open |= {client, upstream}
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, first: bool) -> None:
        try:
            while data := source.recv(65536):
                if first:
                    self.first_lines.append(data.split(b"\r\n", 1)[0].decode("latin-1"))
                    first = False
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                _close(sock)
                with self._lock:
                    self._open.discard(sock)


def _close(sock: socket.socket) -> None:
    """Shut down (which wakes a thread blocked reading it), then close."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
