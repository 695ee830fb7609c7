"""A bare Kafka request/response exchange over a socket, with kio's entities: for the tests
that send what no well-behaved client sends."""

from __future__ import annotations

import io
import socket
import struct

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer


def frame_request(request, correlation_id: int = 7, client_id: str = "fmq-test") -> bytes:
    header_type = request.__header_schema__
    out = io.BytesIO()
    entity_writer(header_type)(out, header_type(
        request_api_key=request.__api_key__, request_api_version=request.__version__,
        correlation_id=correlation_id, client_id=client_id))
    entity_writer(type(request))(out, request)
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body


def read_answer(api_key: int, version: int, data: bytes):
    """A framed answer read by kio (its header, then its body): ``(correlation_id, answer)``;
    fails unless the frame's size and what kio read cover ``data`` exactly."""
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    response_type = load_response_schema(api_key, version)
    header, header_size = entity_reader(response_type.__header_schema__)(data, 4)
    answer, body_size = entity_reader(response_type)(data, 4 + header_size)  # sizes read
    assert 4 + header_size + body_size == len(data)
    return header.correlation_id, answer


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def read_response(frame: bytes, api_key: int, version: int):
    response_type = load_response_schema(api_key, version)
    header_type = response_type.__header_schema__
    header, size = entity_reader(header_type)(frame, 0)
    body, _ = entity_reader(response_type)(frame, size)
    return header, body


def exchange(address: tuple[str, int], request, correlation_id: int = 7):
    """Send ``request``, return (header, response) decoded at its own version."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(frame_request(request, correlation_id))
        return read_response(recv_frame(sock), request.__api_key__, request.__version__)


def request_type(api_key: int, version: int):
    return load_request_schema(api_key, version)
