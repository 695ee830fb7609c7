"""The FMQ wire protocol: pure encode/parse, shared by the server and the client.

No I/O here: bytes in, typed values out, tested by feeding bytes. Layers:

* :mod:`fmq.protocol.types`: field types (integers, strings, bytes, lists, structs);
* :mod:`fmq.protocol.structs`: structs of named fields and their field-by-field reference
  codec; the codec they use comes from :mod:`fmq.protocol._impl`, the one seat that picks a
  compiled twin when installed and else the generated pure Python of
  ``fmq.protocol.struct_codecs`` (written by :mod:`fmq.protocol.generate`);
* :mod:`fmq.protocol.schema`: the one table of opcodes and their request/response fields;
* :mod:`fmq.protocol.layout`: sizes and fixed formats derived from the schema;
* :mod:`fmq.protocol.frame`: the length-prefixed frame with version, opcode, flags and
  request id, plus error responses carrying an FMQError code;
* :mod:`fmq.protocol.error_fields`: the error a response carries, rebuilt with its class,
  message and fields;
* :mod:`fmq.protocol.values`: the wire's field dicts <-> Message, SendResult,
  StoredMessage and UncertainTx, for the server and the client alike.

``docs/protocol.md`` is the long form, complete enough to write a client in another
language.
"""

from fmq.protocol.error_fields import make_error
from fmq.protocol.frame import (
    DEFAULT_MAX_FRAME,
    FLAG_ERROR,
    FLAG_RESPONSE,
    HEADER_SIZE,
    PREFIX_SIZE,
    PROTOCOL_VERSION,
    Frame,
    FrameDecoder,
    FrameTooLarge,
    decode_error,
    decode_request,
    decode_response,
    encode_error,
    encode_request,
    encode_response,
    frame_length,
    parse_frame,
)
from fmq.protocol.schema import SCHEMA, Op

__all__ = [
    "DEFAULT_MAX_FRAME", "FLAG_ERROR", "FLAG_RESPONSE", "Frame", "FrameDecoder",
    "FrameTooLarge", "HEADER_SIZE", "Op", "PREFIX_SIZE", "PROTOCOL_VERSION", "SCHEMA",
    "decode_error", "decode_request", "decode_response", "encode_error", "encode_request",
    "encode_response", "frame_length", "make_error", "parse_frame",
]
