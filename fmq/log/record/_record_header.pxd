# cython: language_level=3
"""A stored record's header read and checked in C, for the compiled twins that read the
log's bytes themselves: ``fmq/log/record/_record_c.pyx`` (the codec's decode and its runs)
and, through ``_stored_view.pxd``, ``fmq/server/kafka/_stored_batches_c.pyx`` (Fetch's
batches) and ``fmq/server/ops/_pull_messages_c.pyx`` (PULL's messages) from the stored
records. One definition of the layout's checks (fmq.log.record.layout's docstring: a 72-byte
little-endian header, its length, CRC-32C of the bytes after the CRC field, magic, version,
type, own log offset and field lengths) and of the CRC-32C in SSE 4.2, cimported by each.
"""

from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "Python.h":
    int PyBUF_READ

# CRC-32C with the SSE 4.2 instruction, where the CPU has it (checked at run time): the
# same function as the crc32c package's, without a Python call and a memoryview per record
# (4,700 of the 11,000 instructions a decode of a 1 KiB record took).
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    #include <cpuid.h>
    __attribute__((target("sse4.2")))
    static uint32_t fmq_crc32c_sse42(const unsigned char *p, size_t n) {
        uint64_t c = 0xFFFFFFFFu;
        uint32_t c32;
        while (n >= 8) {
            uint64_t v;
            memcpy(&v, p, 8);
            c = __builtin_ia32_crc32di(c, v);
            p += 8;
            n -= 8;
        }
        c32 = (uint32_t)c;
        while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
        return c32 ^ 0xFFFFFFFFu;
    }
    static int fmq_crc32c_sse42_available(void) {
        unsigned int a, b, c, d;
        if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
        return (c & bit_SSE4_2) != 0;
    }
    #else
    static uint32_t fmq_crc32c_sse42(const unsigned char *p, size_t n) { return 0; }
    static int fmq_crc32c_sse42_available(void) { return 0; }
    #endif
    """
    uint32_t fmq_crc32c_sse42(const unsigned char* p, size_t n) nogil
    int fmq_crc32c_sse42_available() nogil


cdef struct RecordFormat:
    uint64_t header  # the header's bytes
    uint32_t magic
    uint32_t version
    bint known_type[256]  # by type code


cdef inline void record_format(RecordFormat* fmt, object header, object magic, object version,
                               object type_codes):
    """``fmt`` filled from the layout's constants (fmq.log.record.layout: HEADER_SIZE,
    MAGIC, FORMAT_VERSION, TYPE_BY_CODE's codes), once at a twin's import."""
    cdef int code
    fmt.header = header
    fmt.magic = magic
    fmt.version = version
    for code in range(256):
        fmt.known_type[code] = code in type_codes


cdef inline uint64_t le(const unsigned char* p, int n) noexcept:
    """The little-endian unsigned integer of ``n`` bytes at ``p``."""
    cdef uint64_t v = 0
    cdef int i
    for i in range(n - 1, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef inline bint crc_in_c(object crc32c):
    """Whether the CRC can be computed in C for ``crc32c``: the CPU has SSE 4.2 and the
    function is CRC-32C (its check value); any other function is called as given."""
    if not fmq_crc32c_sse42_available():
        return False
    try:
        return crc32c(b"123456789") == 0xE3069283 and fmq_crc32c_sse42(
            <const unsigned char*>b"123456789", 9) == 0xE3069283
    except Exception:  # noqa - a function that cannot take bytes is called as given
        return False


cdef inline uint64_t crc_after_field(bint in_c, object crc32c, const unsigned char* h,
                                     uint64_t length) except? 0:
    """The CRC of the record of ``length`` bytes at ``h``: of its bytes after the CRC
    field, in C or by calling ``crc32c``."""
    if in_c:
        return fmq_crc32c_sse42(h + 8, length - 8)
    return crc32c(PyMemoryView_FromMemory(<char*>(h + 8), <Py_ssize_t>length - 8,
                                          PyBUF_READ))


cdef inline uint64_t checked_length(const RecordFormat* fmt, const unsigned char* h,
                                    Py_ssize_t available, uint64_t at_offset, uint64_t limit,
                                    bint in_c, object crc32c) except? 0:
    """The length of the record at ``h`` (``available`` bytes from it) if its header passes
    every check of the log codec's decode (its length within ``limit`` and the bytes there,
    magic, version, a known type, its own log offset ``at_offset``, the field lengths adding
    up, the CRC), else 0: the caller's reference decides, and names the first it finds."""
    cdef uint64_t length, total
    if available < <Py_ssize_t>fmt.header:
        return 0
    length = le(h, 4)
    if length < fmt.header or length > limit or length > <uint64_t>available:
        return 0
    if (le(h + 8, 2) != fmt.magic or h[10] != fmt.version or not fmt.known_type[h[11]]
            or le(h + 12, 8) != at_offset):
        return 0
    total = (fmt.header + le(h + 52, 2) + le(h + 54, 2) + le(h + 56, 2) + le(h + 58, 2)
             + le(h + 60, 2) + le(h + 64, 4) + le(h + 68, 4))
    if total != length:
        return 0
    # The CRC after the cheap checks: the order does not matter, any failure goes to the
    # reference.
    if crc_after_field(in_c, crc32c, h, length) != le(h + 4, 4):
        return 0
    return length
