"""A TCP proxy on 127.0.0.1 in front of one FMQ server that forwards requests as they come
and answers frame by frame through a hook, so a test can damage or swallow one answer.

Subclasses override :meth:`FrameProxy.answer`: it gets each whole answer frame (length
prefix included) and returns the bytes to forward, or None to drop the frame."""

from __future__ import annotations

import socket
import struct
import threading

_LENGTH = struct.Struct(">I")


class FrameProxy:
    def __init__(self, upstream: str | tuple[str, int]) -> None:
        if isinstance(upstream, str):
            host, _, port = upstream.rpartition(":")
            upstream = (host, int(port))
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._lock = threading.Lock()  # answer() runs on one pump thread per connection
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def answer(self, frame: bytes) -> bytes | None:
        return frame

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()  # the server is down: the client sees a lost connection
                continue
            server.settimeout(None)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        buf = bytearray()
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if not answers:
                    dst.sendall(data)
                    continue
                buf += data
                # Whole frames only, so the hook sees (and may change) exactly one answer.
                while len(buf) >= _LENGTH.size:
                    (length,) = _LENGTH.unpack_from(buf)
                    if len(buf) < 4 + length:
                        break
                    frame = bytes(buf[:4 + length])
                    del buf[:4 + length]
                    with self._lock:
                        out = self.answer(frame)
                    if out is not None:
                        dst.sendall(out)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for s in self._sockets:
            try:
                s.close()
            except OSError:
                pass
