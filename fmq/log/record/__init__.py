"""The FMQ record format, version 1. This docstring is the spec; docs/format.md is the long form.

Every record in the log has a 72-byte header followed by up to seven variable-length
fields. All integers are **little-endian**. Offsets are byte positions in the whole log.

======  ====  ==============  ===========================================================
offset  size  field           meaning
======  ====  ==============  ===========================================================
0       4     length          total bytes of the record, header included (u32)
4       4     crc             CRC-32C (Castagnoli) of bytes ``[8, length)`` (u32)
8       2     magic           ``0xF1F0`` (bytes ``F0 F1``): lets a scanner find records
10      1     version         format version, 1
11      1     type            record type, see :class:`RecordType`
12      8     log_offset      the record's own log offset (u64); must equal where it lies
20      8     store_time      store time, ms since the Unix epoch (i64)
28      4     queue_id        queue id (i32), -1 when the type has none
32      8     queue_offset    offset in the consume queue (i64), -1 when none
40      8     ref_offset      log offset of the record this one points to (i64), -1 when none
48      4     ref_size        length of that record (u32), 0 when none
52      2     topic_len       bytes of topic (u16)
54      2     tx_id_len       bytes of transaction id (u16)
56      2     group_len       bytes of producer group (u16)
58      2     key_len         bytes of key (u16)
60      2     tags_len        bytes of tags (u16)
62      2     flags           reserved, 0
64      4     props_len       bytes of encoded properties (u32)
68      4     body_len        bytes of body (u32)
72      ...   topic, tx_id, producer_group, key, tags, properties, body, in this order
======  ====  ==============  ===========================================================

``length`` must equal ``72 + topic_len + tx_id_len + group_len + key_len + tags_len +
props_len + body_len``. Strings are UTF-8. An empty key or tags field means "none".
Properties are ``u16 count`` then per pair ``u16 len, key bytes, u16 len, value bytes``.

What each type carries (other fields zero-length / -1):

* ``MESSAGE`` (1): topic, queue id, queue offset, key, tags, properties, body.
* ``PREPARE`` (2): tx id, producer group; ``ref_size`` = the number of PRE_MESSAGEs the
  transaction holds (they follow the PREPARE in the log). Opens a transaction. Recovery
  proves a prepare complete by counting its PRE_MESSAGEs; a cut one is rolled back. Logs
  written before the count existed carry 0 there: "not recorded", taken as complete.
  ``ref_offset`` is -1, or, for a *relocated* prepare (retention rewrote an old open
  transaction at the log head), the offset of the PREPARE it replaces once complete.
* ``PRE_MESSAGE`` (3): tx id, group, topic, queue id, key, tags, properties, body. No queue offset.
* ``REF_MESSAGE`` (4): tx id, producer group (empty in older logs), topic, queue id, queue
  offset, key, tags; ``ref_offset`` / ``ref_size`` address its PRE_MESSAGE, whose body the
  consumer reads. No body.
* ``TX_MESSAGE`` (5): as REF_MESSAGE but with a copy of the PRE_MESSAGE's properties and body.
* ``COMMIT`` (6) / ``ROLLBACK`` (7): tx id, group; ``ref_offset`` = the PREPARE's offset.
* ``OFFSET`` (8): a consumer group's committed offset: group (in the producer-group
  field), topic, queue id, ``queue_offset`` = the next offset the group consumes. The
  latest in log order wins. ``ref_offset`` is -1, or, for a copy retention wrote at the
  log head before deleting the segment holding the original, the original's offset.
* ``EPOCH`` (9): a primary's term starts: ``queue_offset`` = the epoch number, the producer-group
  field = the node that started it. Written and fdatasync'd before the term acknowledges anything.
* ``TIMER`` (10): as MESSAGE, but ``queue_offset`` = due time (ms), ``queue_id`` -1 unless chosen,
  ``ref_offset`` = the TIMER it relocates (or -1); a MESSAGE naming a TIMER there delivers it.
* ``TOPIC`` (11): a topic's whole configuration after a create, alter or delete: topic, and
  the property ``config`` = the JSON of :class:`fmq.topic_config.TopicConfig` (queues,
  retention, maximum message size, state, the queue floors a delete set). The latest in
  log order wins; a topic without one has the broker's defaults.
* ``FILLER`` (127): header only (72 bytes): the rest of the segment is unused.

MESSAGE, TX_MESSAGE and REF_MESSAGE each put one entry into their consume queue,
:class:`~fmq.log.record.queue_entry.QueueEntry`: topic, queue id, queue offset, the log
offset and length of the record holding the body (the record itself; a REF's ``ref_offset``
and ``ref_size``), CRC-32C of the tags (0 without), store time, key, the record's own log
offset. The runs below build it for a plain MESSAGE without decoding a ``Record``.

The codec is pure (bytes in, bytes out): it never touches files and never fsyncs. Decoding
checks every length against the bytes available and the configured maximum before slicing,
and raises :class:`~fmq.errors.IncompleteRecord` when the bytes end inside the record or
:class:`~fmq.errors.BadRecord` when a check fails.

The package: ``layout`` (header, types, :class:`Record`, the properties field), ``codec``
(the Python codec), ``marks`` (the fast twin of ``encode_into`` for PREPARE, COMMIT,
ROLLBACK), ``crc`` (CRC-32C in hardware and crcmod's reference), ``sizes`` (a record's size
without encoding it), ``queue_entry`` (:class:`QueueEntry`), ``runs`` (many records in one
call: a scan's, a batch of sends', a transaction request's). **This module is the one place an implementation is chosen**: the
fastest twin available, or every reference twin when the environment sets
``FMQ_NO_EXTENSIONS=1``. Every twin writes the same bytes as its reference; :data:`TWINS`
lists the pairs, and one shared test compares each pair on hostile input. A faster twin
(compiled, say) is added here, to :data:`TWINS`, and nowhere else. ``codec`` runs compiled
(``_codec_c``: the same source compiled by Cython, setup.py) when ``fmq.native.choose``
picks it; ``marks`` runs where ``_record_c`` is not built (its encoder writes marks too,
faster); ``encode_into`` (once per placed record) and ``decode_at``
(once per record of every scan) run from ``_record_c.pyx`` (written in Cython: the header
written and read in C), which hands whatever it does not take as it is, failures included,
to the codec's own.
"""

from __future__ import annotations

import functools

from fmq import native
from fmq.log.record import codec as codec_py
from fmq.log.record import marks
from fmq.log.record import runs as _runs
from fmq.log.record.codec import Codec, python_codec, record_length
from fmq.log.record.crc import hardware_crc32c, reference_crc32c
from fmq.log.record.layout import (
    FORMAT_MAX_RECORD,
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAGIC_BYTES,
    MAGIC_POSITION,
    MAX_SHORT_FIELD,
    NONE,
    Record,
    RecordType,
    decode_properties,
    encode_properties,
    properties_length,
)
from fmq.log.record.queue_entry import QueueEntry
from fmq.log.record.sizes import RECORD_BOUND, check_fits, encoded_length, encoded_size

#: ``FMQ_NO_EXTENSIONS=1`` runs every reference twin (to rule a fast one out, or to test it).
NO_EXTENSIONS = native.no_extensions()
#: The codec module running: ``codec_py`` or its compiled twin ``_codec_c``.
CODEC_MODULE = native.choose(codec_py)
#: The package's compiled ``encode_into`` and ``decode_at`` and runs (``_record_c.pyx``,
#: written in Cython), or None.
RECORD_MODULE = native.load("fmq.log.record._record_c")

#: The reference codec: crcmod's CRC, the general encoder for every record.
REFERENCE: Codec = python_codec(reference_crc32c)

if NO_EXTENSIONS or hardware_crc32c is None:
    crc32c = reference_crc32c
    CRC_IMPLEMENTATION = "crcmod"
    _codec = REFERENCE
    encode_mark_into = REFERENCE.encode_into
else:
    crc32c = hardware_crc32c
    CRC_IMPLEMENTATION = "crc32c"
    _codec = CODEC_MODULE.python_codec(crc32c)
    encode_mark_into = marks.mark_encoder(crc32c, _codec.encode_into)

encode_into, encode, check, decode, decode_at, filler = _codec
#: ``decode_run`` (the reference is fmq.log.record.runs) in C, or None: the pure path
#: decodes record by record. Not in TWINS: a run may stop earlier than its reference.
decode_run = None
#: ``decode_entry_run`` (reference in fmq.log.record.runs) in C, or None: recovery's redo.
decode_entry_run = None
#: ``position_run`` (reference in fmq.log.record.runs) in C, or None: the Spark source's
#: column-wise scan (the positions of checked records, nothing decoded).
position_run = None
if RECORD_MODULE is not None:  # each calls the codec's own for whatever it does not take
    encode_into = RECORD_MODULE.EncodeInto(crc32c, _codec.encode_into)
    # The C encoder writes a mark in about 0.4 us, the compiled mark encoder (Python
    # compiled as it is) in about 1.0: marks take the general one where it is in C.
    encode_mark_into = encode_into
    decode_at = RECORD_MODULE.DecodeAt(crc32c, _codec.decode_at)
    decode_run = decode_at.run
    decode_entry_run = decode_at.entry_run
    position_run = decode_at.position_run
#: ``encode_message_run(buf, room, log_offset, store_time, messages, queue_ids,
#: queue_offsets, start, stop, out)``: a batch of sends' MESSAGE records and their
#: :class:`QueueEntry` (:func:`fmq.log.record.runs.encode_message_run`), in C where compiled.
encode_message_run = (encode_into.message_run if RECORD_MODULE is not None
                      else functools.partial(_runs.encode_message_run, encode_into, crc32c))
#: ``encode_tx_run(buf, room, log_offset, store_time, tx_id, producer_group, records,
#: start, stop, out)``: a transaction's records of one request
#: (:func:`fmq.log.record.runs.encode_tx_run`), in C where compiled.
encode_tx_run = (encode_into.tx_run if RECORD_MODULE is not None
                 else functools.partial(_runs.encode_tx_run, encode_into))

#: Each chosen implementation next to its reference, by name: what the twin test compares.
TWINS: dict[str, tuple[object, object]] = {
    "crc32c": (reference_crc32c, crc32c),
    "encode_into": (REFERENCE.encode_into, encode_into),
    "encode_mark_into": (REFERENCE.encode_into, encode_mark_into),
    "decode_at": (REFERENCE.decode_at, decode_at),
    "check": (REFERENCE.check, check),
}

__all__ = [
    "CODEC_MODULE", "CRC_IMPLEMENTATION", "FORMAT_MAX_RECORD", "FORMAT_VERSION", "HEADER", "HEADER_SIZE",
    "MAGIC", "MAGIC_BYTES", "MAGIC_POSITION", "MAX_SHORT_FIELD", "NONE", "NO_EXTENSIONS",
    "QueueEntry", "RECORD_BOUND", "RECORD_MODULE", "REFERENCE", "TWINS", "Record", "RecordType",
    "check", "check_fits",
    "crc32c", "decode", "decode_at", "decode_entry_run", "decode_run", "decode_properties", "encode", "encode_into",
    "encode_message_run", "encode_tx_run",
    "encode_mark_into", "encode_properties", "position_run", "encoded_length", "encoded_size", "filler",
    "properties_length", "record_length", "reference_crc32c",
]
