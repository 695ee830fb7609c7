"""A TCP proxy on 127.0.0.1 that can make the connections open now go silent (no byte
forwarded, nothing closed: a stream that hangs, as after a lost NAT entry) or cut them,
while new connections work. For clients of a long-lived stream such as an etcd watch."""

from __future__ import annotations

import socket
import threading


class StallProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket, threading.Event]] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            stalled = threading.Event()
            with self._lock:
                self._pairs.append((client, server, stalled))
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst, stalled),
                                 daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, stalled: threading.Event) -> None:
        try:
            while data := src.recv(65536):
                if stalled.is_set():
                    return  # swallow it and everything after; keep both sockets open
                dst.sendall(data)
        except OSError:
            pass
        if not stalled.is_set():
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stall(self) -> int:
        """Silence every connection open now; how many there were."""
        with self._lock:
            for _c, _s, stalled in self._pairs:
                stalled.set()
            return len(self._pairs)

    def cut(self) -> None:
        """Close every connection open now."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, server, _ in pairs:
            for s in (client, server):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()
