"""A raw-socket HTTP server on loopback, for tests whose answers must be exactly the bytes they
write (framing included): one thread per connection, requests read with their
``Content-Length`` body. Subclasses say what a connection gets (:meth:`RawServer.serve`)."""

from __future__ import annotations

import contextlib
import socket
import threading

#: Seconds; only a hang gets near it.
GENEROUS = 60.0


def read_request(conn: socket.socket, buffer: bytes) -> tuple[bytes, bytes, bytes] | None:
    """``(head, body, rest)`` of the next request on *conn*, *buffer* being what was read after
    the last one; None when the peer hangs up first."""
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(65536)
        if not data:
            return None
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    sized = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    length = int(sized[0].split(b":")[1])
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None
        rest += data
    return head, rest[:length], rest[length:]


class RawServer:
    """Listens on a free loopback port (:attr:`url`); :attr:`connections` counts those accepted."""

    def __init__(self) -> None:
        self.connections = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        """Answer the connection *conn* (closed afterwards)."""
        raise NotImplementedError

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()  # before close() can see it and join it
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        try:
            self.serve(conn)
        except OSError:
            return  # the client hung up
        finally:
            conn.close()

    def close(self) -> None:
        """Stop listening, end the connections' waits for more and join their threads."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # ends the accept() under way
        self._sock.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(GENEROUS)
