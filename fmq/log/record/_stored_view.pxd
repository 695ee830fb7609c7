# cython: language_level=3
"""A stored record's fields and properties read and checked in C, for the compiled twins
that write answers straight from the log's bytes: ``fmq/server/ops/_pull_messages_c.pyx``
(a PULL's messages) and ``fmq/server/kafka/_stored_batches_c.pyx`` (a Fetch's batches).
One definition of where a record's fields lie (fmq.log.record.layout's docstring: the
72-byte header, then topic, tx id, group, key, tags, properties, body) and of the log
codec's checks on them (the header's, ``_record_header.pxd``; the texts UTF-8; the
properties field's count, lengths and end; no name given twice), cimported by both.

Nothing here raises for a record it does not take: it answers ``STORED_REFUSED`` and the
caller hands the input, whole, to its reference ("the reference decides"). The properties
are walked one pair at a time (``walk_start``, then ``walk_next`` while it answers
``STORED_PAIR``, then the walk's ``refused``), so each caller decides a pair's fate as it
comes, in the stored order.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcmp

from fmq.log.record._record_header cimport RecordFormat, checked_length, le, record_format

# What read_fields and walk_next answer (-1: a Python exception is set).
cdef enum:
    STORED_OK = 0  # read; or, from walk_next, the walk's end (``refused`` says how it ended)
    STORED_REFUSED = 1  # a check of the log codec's failed: the reference decides
    STORED_PAIR = 2  # walk_next read one more pair into the walk's ``pair``

#: Properties a record may have for the C path (a name given twice is looked for pairwise).
cdef enum:
    MAX_PROPERTIES = 64


cdef struct StoredFields:
    const uint8_t *p  # the record's bytes
    Py_ssize_t key_at, key_len, tags_at, tags_len  # from p
    Py_ssize_t props_at, props_len, body_at, body_len


cdef struct PropertyPair:
    Py_ssize_t name_at, name_len, text_at, text_len  # from the record's start


cdef struct PropertyWalk:
    Py_ssize_t pos, end, count, index  # the next pair's place, the field's end
    bint refused  # the walk ended on a check of decode_properties' failing
    PropertyPair pair  # the pair walk_next read last
    Py_ssize_t names[64]  # the pairs read so far (MAX_PROPERTIES of them at most)
    Py_ssize_t name_lens[64]
    Py_ssize_t text_lens[64]


cdef inline void stored_format(RecordFormat *fmt):
    """``fmt`` filled from fmq.log.record.layout's constants, once at a twin's import."""
    from fmq.log.record.layout import FORMAT_VERSION, HEADER_SIZE, MAGIC, TYPE_BY_CODE
    record_format(fmt, HEADER_SIZE, MAGIC, FORMAT_VERSION, TYPE_BY_CODE)


cdef inline bint is_ascii(const uint8_t *p, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 0x80:
            return False
    return True


cdef inline bint is_name(const uint8_t *p, Py_ssize_t n, bytes name) noexcept:
    """Whether the ``n`` bytes at ``p`` are ``name``'s."""
    return n == PyBytes_GET_SIZE(name) and memcmp(p, PyBytes_AS_STRING(name), n) == 0


cdef inline int check_text(const uint8_t *p, Py_ssize_t n) except -1:
    """``STORED_OK`` if ``p`` is UTF-8 as the log codec's decode takes it."""
    if is_ascii(p, n):
        return STORED_OK
    try:
        PyUnicode_DecodeUTF8(<const char *>p, n, NULL)
    except UnicodeDecodeError:
        return STORED_REFUSED
    return STORED_OK


cdef inline int read_fields(StoredFields *f, const RecordFormat *fmt, bint crc_in_c,
                            object crc32c, const uint8_t *p, Py_ssize_t available,
                            uint64_t log_offset, uint64_t max_record_size) except -1:
    """Check the record at ``p`` as the log codec's decode does (its header, and its
    topic, tx id, group, key and tags as text) and read its fields' places into ``f``."""
    cdef Py_ssize_t at, i, n
    if not checked_length(fmt, p, available, log_offset, max_record_size, crc_in_c, crc32c):
        return STORED_REFUSED
    at = <Py_ssize_t>fmt.header
    for i in range(5):
        n = <Py_ssize_t>le(p + 52 + 2 * i, 2)
        if check_text(p + at, n) != STORED_OK:
            return STORED_REFUSED
        if i == 3:
            f.key_at, f.key_len = at, n
        elif i == 4:
            f.tags_at, f.tags_len = at, n
        at += n
    f.props_at, f.props_len = at, <Py_ssize_t>le(p + 64, 4)
    f.body_at, f.body_len = at + f.props_len, <Py_ssize_t>le(p + 68, 4)
    f.p = p
    return STORED_OK


cdef inline Py_ssize_t read_pair(const uint8_t *p, Py_ssize_t pos, PropertyPair *pair
                                 ) noexcept:
    """The pair at ``pos`` of a properties field already walked; the next pair's place."""
    pair.name_len = <Py_ssize_t>le(p + pos, 2)
    pair.name_at = pos + 2
    pos = pair.name_at + pair.name_len
    pair.text_len = <Py_ssize_t>le(p + pos, 2)
    pair.text_at = pos + 2
    return pair.text_at + pair.text_len


cdef inline bint _field_fits(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end) noexcept:
    """Whether the length-prefixed field at ``pos`` lies before ``end``."""
    return pos + 2 <= end and pos + 2 + <Py_ssize_t>le(p + pos, 2) <= end


cdef inline void walk_start(PropertyWalk *w, const StoredFields *f) noexcept:
    """``w`` set on ``f``'s properties field (``refused`` where decode_properties refuses
    its count: the walk then ends at once)."""
    w.pos, w.end = f.props_at, f.props_at + f.props_len
    w.count = w.index = 0
    w.refused = False
    if not f.props_len:
        return
    if f.props_len < 2:
        w.refused = True
        return
    w.count = <Py_ssize_t>le(f.p + w.pos, 2)
    w.pos += 2
    if w.count > MAX_PROPERTIES:
        w.refused = True


cdef inline int _pair_checked(PropertyWalk *w, const uint8_t *p) except -1:
    """The pair at ``w.pos`` into ``w.pair``, if it passes decode_properties' checks."""
    cdef Py_ssize_t j, name_at, name_len
    if not _field_fits(p, w.pos, w.end):
        return STORED_REFUSED
    if not _field_fits(p, w.pos + 2 + <Py_ssize_t>le(p + w.pos, 2), w.end):
        return STORED_REFUSED
    w.pos = read_pair(p, w.pos, &w.pair)
    name_at, name_len = w.pair.name_at, w.pair.name_len
    if (check_text(p + name_at, name_len) != STORED_OK
            or check_text(p + w.pair.text_at, w.pair.text_len) != STORED_OK):
        return STORED_REFUSED
    for j in range(w.index):
        if w.name_lens[j] == name_len and memcmp(p + w.names[j], p + name_at, name_len) == 0:
            return STORED_REFUSED  # a dict keeps the first place, last value
    w.names[w.index], w.name_lens[w.index] = name_at, name_len
    w.text_lens[w.index] = w.pair.text_len
    w.index += 1
    return STORED_OK


cdef inline int walk_next(PropertyWalk *w, const uint8_t *p) except -1:
    """The next pair into ``w.pair`` (``STORED_PAIR``) with decode_properties' checks, else
    ``STORED_OK``, the end: ``w.refused`` unless all were read and fill the field exactly."""
    if w.refused:
        return STORED_OK
    if w.index == w.count:
        w.refused = w.pos != w.end
        return STORED_OK
    if _pair_checked(w, p) != STORED_OK:
        w.refused = True
        return STORED_OK
    return STORED_PAIR
