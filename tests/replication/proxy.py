"""A TCP proxy on 127.0.0.1 between a follower and its primary that flips one bit, once,
in the middle of the first large answer frame (a REPL_FETCH chunk's record bytes)."""

from __future__ import annotations

import socket
import struct
import threading

LARGE = 4096  # an answer frame this long carries log records


class BitFlipProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.flipped = 0
        self._lock = threading.Lock()
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream, timeout=5)
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
                # Forward whole frames only, so the flip lands inside one chosen frame.
                while len(buf) >= 4:
                    (length,) = struct.unpack_from(">I", buf)
                    if len(buf) < 4 + length:
                        break
                    frame = bytearray(buf[:4 + length])
                    del buf[:4 + length]
                    with self._lock:
                        if not self.flipped and length >= LARGE:
                            frame[4 + length // 2] ^= 0x10
                            self.flipped += 1
                    dst.sendall(frame)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for s in self._sockets:
            s.close()
