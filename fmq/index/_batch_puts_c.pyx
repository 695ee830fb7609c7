# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`fmq.index.batch_puts`: a batch's puts, every database of it, with
the interpreter lock released ONCE, through the LMDB engine py-lmdb itself calls.

py-lmdb exports no ``mdb_*`` symbol and has no C API, but each of its objects carries what
its own C code calls: a ``Transaction`` holds its ``MDB_txn *`` and ``libv``, the table of
entry points of the LMDB engine that serves its environment (py-lmdb 3 bundles two, 0.9 and
1.0, and calls LMDB only through that table), a ``_Database`` its ``MDB_dbi``. This module
mirrors those structures as py-lmdb 3.0.0 lays them out (``lmdb/cpython.c``,
``lmdb/mdb_api.h``), reads them from the objects, and does what ``Cursor.putmulti`` does per
database (``mdb_cursor_open``, ``mdb_cursor_put`` with the flags of ``putmulti()``'s
defaults, ``mdb_cursor_close``), for all the databases in one ``with nogil`` block. As
py-lmdb's ``ENV_UNLOCKED`` does around each of its puts, the block is counted in the
environment's ``active_ops`` (so ``Environment.close`` and ``set_mapsize`` wait for it) and
is not started while another thread is inside ``set_mapsize`` (``resizing``), and the
transaction's ``mutations`` grows by the puts made (py-lmdb's cursors refresh on it).
FMQ would not need the count today (belt and braces): the index grows its map only
through its resize gate, which waits until no transaction is inside
(:class:`~fmq.index.lmdb_env.ResizeGate`), and a close waits for the owner of an open
write transaction to end it (py-lmdb's own rule, issue #465), so neither can run while a
batch is being written; the count keeps that true for any other caller.

**The layout is checked before it is used**, once per process (:func:`direct`): the py-lmdb
release must be one whose layout is mirrored here (:data:`KNOWN_RELEASES`), its types must be
the C extension's (not the cffi implementation's) with the mirrored sizes, and a probe on a
scratch environment, for each engine the build carries, must read back what py-lmdb's own
methods say (the engine's version and path, the transaction's id and owner thread, its
flags, the database's flags) and store through this path what py-lmdb then reads. If
anything disagrees (another py-lmdb release or build), every call goes to the reference
``putmulti`` path: logged once at info level, and :func:`direct` and :data:`REFUSED` say why.
A call the C path does not take as it is (an item not a pair of ``bytes``, a handle of
another type or environment, a transaction already ended) goes to the reference before
anything is written, so both store the same items and raise the same errors.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdlib cimport free, malloc

import errno
import logging
import os
import tempfile
import threading

import lmdb

from fmq.index import batch_puts as reference

cdef extern from "Python.h":
    unsigned long PyThread_get_thread_ident()

cdef extern from *:
    """
    /* py-lmdb 3.0.0's structures, field for field (lmdb/mdb_api.h, lmdb/cpython.c, built
     * without HAVE_MEMSINK as its wheels are). Only the fields read here are typed; the
     * rest hold their place. The sizes are checked against the types' tp_basicsize. */
    #ifdef _WIN32
    #define FMQ_LAYOUT_BUILT 0   /* py-lmdb's counters are LONG and its locks others there */
    typedef int pid_t;
    #else
    #define FMQ_LAYOUT_BUILT 1
    #include <pthread.h>
    #include <sys/types.h>
    #endif

    typedef unsigned int fmq_MDB_dbi;
    typedef struct fmq_MDB_val { size_t mv_size; void *mv_data; } fmq_MDB_val;
    typedef struct fmq_MDB_txn fmq_MDB_txn;
    typedef struct fmq_MDB_cursor fmq_MDB_cursor;
    typedef struct fmq_MDB_env fmq_MDB_env;
    typedef void (*fmq_unused_fn)(void);

    typedef struct fmq_MdbApi {
        int major;
        int minor;
        int patch;
        unsigned int data_version;
        fmq_unused_fn env_create, env_open, env_close, env_copy2, env_copyfd2, env_copy3,
                      env_copyfd3, env_sync, env_stat, env_info, env_get_flags,
                      env_set_flags, env_get_maxkeysize, env_get_maxreaders;
        int (*env_get_path)(fmq_MDB_env *env, const char **path);
        fmq_unused_fn env_set_mapsize, env_set_maxdbs, env_set_maxreaders, reader_check,
                      reader_list;
        fmq_unused_fn txn_begin, txn_commit, txn_abort, txn_reset, txn_renew;
        size_t (*txn_id)(fmq_MDB_txn *txn);
        fmq_unused_fn dbi_open;
        int (*dbi_flags)(fmq_MDB_txn *txn, fmq_MDB_dbi dbi, unsigned int *flags);
        fmq_unused_fn dbi_close, drop, get, put, del, stat;
        int (*cursor_open)(fmq_MDB_txn *txn, fmq_MDB_dbi dbi, fmq_MDB_cursor **cursor);
        void (*cursor_close)(fmq_MDB_cursor *cursor);
        fmq_unused_fn cursor_get;
        int (*cursor_put)(fmq_MDB_cursor *cursor, fmq_MDB_val *key, fmq_MDB_val *data,
                          unsigned int flags);
        fmq_unused_fn cursor_del, cursor_count;
        char *(*strerror_fn)(int err);
        char *(*version_fn)(int *major, int *minor, int *patch);
    } fmq_MdbApi;

    struct fmq_lmdb_object;
    struct fmq_list_head {
        struct fmq_lmdb_object *prev;
        struct fmq_lmdb_object *next;
    };
    #define FMQ_LMDB_OBJECT_HEAD \\
        PyObject_HEAD \\
        struct fmq_list_head siblings; \\
        struct fmq_list_head children; \\
        int valid;

    struct fmq_EnvObject;
    typedef struct fmq_DbObject {
        FMQ_LMDB_OBJECT_HEAD
        struct fmq_EnvObject *env;
        fmq_MDB_dbi dbi;
        unsigned int flags;
    } fmq_DbObject;

    typedef struct fmq_EnvObject {
        FMQ_LMDB_OBJECT_HEAD
        PyObject *weaklist;
        fmq_MDB_env *env;
        const fmq_MdbApi *libv;
        fmq_DbObject *main_db;
        int readonly;
        fmq_MDB_txn *spare_txn;
        int max_spare_txns;
        pid_t pid;
        unsigned long write_txn_tid;
        PyObject *open_keys;
        int active_ops;     /* lmdb_atomic_t: int, changed with __atomic builtins */
        int ops_waiters;
        int write_begins;
        int resizing;
        unsigned long resize_tid;
        int ops_sync_ready;
    #if FMQ_LAYOUT_BUILT
        pthread_mutex_t ops_mutex;
        pthread_cond_t ops_cond;
    #endif
    } fmq_EnvObject;

    typedef struct fmq_TransObject {
        FMQ_LMDB_OBJECT_HEAD
        PyObject *weaklist;
        fmq_EnvObject *env;
        struct fmq_TransObject *parent;
        const fmq_MdbApi *libv;
        fmq_MDB_txn *txn;
        int flags;
        fmq_DbObject *db;
        int mutations;
    } fmq_TransObject;

    #define FMQ_TRANS_RDONLY 2
    #define FMQ_MDB_KEYEXIST (-30799)

    /* py-lmdb's ACTIVE_OPS_INC / ACTIVE_OPS_DEC (with ENV_WAKE_WAITERS): the count of
     * operations in flight with the interpreter lock released, which Environment.close and
     * set_mapsize drain before they unmap. */
    #if FMQ_LAYOUT_BUILT
    static void fmq_active_ops_inc(fmq_EnvObject *env) {
        __atomic_add_fetch(&env->active_ops, 1, __ATOMIC_SEQ_CST);
    }
    static void fmq_active_ops_dec(fmq_EnvObject *env) {
        __atomic_sub_fetch(&env->active_ops, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&env->ops_waiters, __ATOMIC_SEQ_CST) != 0) {
            pthread_mutex_lock(&env->ops_mutex);
            pthread_cond_broadcast(&env->ops_cond);
            pthread_mutex_unlock(&env->ops_mutex);
        }
    }
    static int fmq_load_int(int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    #else  /* never called: _refusal() refuses first */
    static void fmq_active_ops_inc(fmq_EnvObject *env) { (void)env; }
    static void fmq_active_ops_dec(fmq_EnvObject *env) { (void)env; }
    static int fmq_load_int(int *p) { return *p; }
    #endif
    """
    int FMQ_LAYOUT_BUILT
    int FMQ_TRANS_RDONLY
    int FMQ_MDB_KEYEXIST
    ctypedef unsigned int fmq_MDB_dbi
    ctypedef struct fmq_MDB_val:
        size_t mv_size
        void *mv_data
    ctypedef struct fmq_MDB_txn
    ctypedef struct fmq_MDB_cursor
    ctypedef struct fmq_MDB_env
    ctypedef struct fmq_MdbApi:
        int major
        int minor
        int patch
        unsigned int data_version
        int (*env_get_path)(fmq_MDB_env *env, const char **path) nogil
        size_t (*txn_id)(fmq_MDB_txn *txn) nogil
        int (*dbi_flags)(fmq_MDB_txn *txn, fmq_MDB_dbi dbi, unsigned int *flags) nogil
        int (*cursor_open)(fmq_MDB_txn *txn, fmq_MDB_dbi dbi, fmq_MDB_cursor **cursor) nogil
        void (*cursor_close)(fmq_MDB_cursor *cursor) nogil
        int (*cursor_put)(fmq_MDB_cursor *cursor, fmq_MDB_val *key, fmq_MDB_val *data,
                          unsigned int flags) nogil
        char *(*strerror_fn)(int err) nogil
        char *(*version_fn)(int *major, int *minor, int *patch) nogil
    ctypedef struct fmq_DbObject:
        int valid
        void *env  # its fmq_EnvObject (declared below)
        fmq_MDB_dbi dbi
        unsigned int flags
    ctypedef struct fmq_EnvObject:
        int valid
        fmq_MDB_env *env
        const fmq_MdbApi *libv
        fmq_DbObject *main_db
        int readonly
        int max_spare_txns
        long pid
        unsigned long write_txn_tid
        PyObject *open_keys
        int active_ops
        int ops_waiters
        int write_begins
        int resizing
        unsigned long resize_tid
        int ops_sync_ready
    ctypedef struct fmq_TransObject:
        int valid
        fmq_EnvObject *env
        void *parent
        const fmq_MdbApi *libv
        fmq_MDB_txn *txn
        int flags
        fmq_DbObject *db
        int mutations
    void fmq_active_ops_inc(fmq_EnvObject *env)
    void fmq_active_ops_dec(fmq_EnvObject *env)
    int fmq_load_int(int *p)

log = logging.getLogger("fmq.index.batch_puts")

#: The py-lmdb releases whose structures are mirrored above (read from their sources). Any
#: other release runs the reference: add one here only after comparing its ``cpython.c``
#: and ``mdb_api.h`` with the mirror (the probe checks, but a wrong mirror may crash it).
KNOWN_RELEASES = ("3.0.0",)

#: Why the direct path does not run in this process ("" while it does or is not checked yet).
REFUSED = ""

#: py-lmdb's error class per LMDB / errno code (its ``error_map``, lmdb/cpython.c), for the
#: errors this path raises itself; any other code is a plain ``lmdb.Error``, as there.
_ERROR_CLASSES = {
    -30799: "KeyExistsError", -30798: "NotFoundError", -30797: "PageNotFoundError",
    -30796: "CorruptedError", -30795: "PanicError", -30794: "VersionMismatchError",
    -30793: "InvalidError", -30792: "MapFullError", -30791: "DbsFullError",
    -30790: "ReadersFullError", -30789: "TlsFullError", -30788: "TxnFullError",
    -30787: "CursorFullError", -30786: "PageFullError", -30785: "MapResizedError",
    -30784: "IncompatibleError", -30783: "BadRslotError", -30782: "BadTxnError",
    -30781: "BadValsizeError", -30780: "BadDbiError", -30779: "ProblemError",
    -30778: "BadChecksumError", -30777: "CryptoFailError", -30776: "EnvEncryptionError",
    -30770: "ReadonlyError", errno.EACCES: "ReadonlyError",
    errno.EINVAL: "InvalidParameterError", errno.EAGAIN: "LockError",
    errno.ENOMEM: "MemoryError", errno.ENOSPC: "DiskError",
}
#: py-lmdb's ``err_hint``: advice it appends to these errors' messages.
_HINTS = {
    -30792: "Please use a larger Environment(map_size=) parameter",
    -30791: "Please use a larger Environment(max_dbs=) parameter",
    -30790: "Please use a larger Environment(max_readers=) parameter",
    -30788: "Please do less work within your transaction",
}

cdef int _state = 0  # 0: not checked yet, 1: direct, -1: refused
#: The newest engine's table: py-lmdb words every error with its strerror (a superset).
cdef const fmq_MdbApi *_newest = NULL
_check_lock = threading.Lock()


def direct() -> bool:
    """Whether this process's puts go through the direct path (checking the layout first,
    once); when not, :data:`REFUSED` says why."""
    global REFUSED, _state
    if _state == 0:
        with _check_lock:
            if _state == 0:
                why = _refusal()
                if why:
                    REFUSED = why
                    _state = -1
                    log.info("the index's LMDB puts go through py-lmdb's putmulti, the "
                             "interpreter lock released per item: %s", why)
                else:
                    _state = 1
    return _state == 1


def put_batches(txn, batches) -> list:
    """:func:`fmq.index.batch_puts.put_batches`, the interpreter lock released once."""
    cdef fmq_TransObject *t
    cdef fmq_DbObject *d
    cdef Py_ssize_t total = 0
    if _state != 1 and not direct():
        return reference.put_batches(txn, batches)
    if type(txn) is not lmdb.Transaction:
        return reference.put_batches(txn, batches)
    batches = list(batches)  # iterated twice when the reference takes it
    t = <fmq_TransObject *><PyObject *>txn
    if not t.valid or t.env == NULL or not t.env.valid or t.libv != t.env.libv:
        return reference.put_batches(txn, batches)
    # Each database's items held as tuples while the lock is released (nothing can free
    # their bytes), counted and checked: any surprise goes to the reference.
    held = []
    for entry in batches:
        if type(entry) is not tuple or PyTuple_GET_SIZE(entry) != 2:
            return reference.put_batches(txn, batches)
        db = <object>PyTuple_GET_ITEM(entry, 0)
        items = <object>PyTuple_GET_ITEM(entry, 1)
        if type(items) is list:
            items = tuple(items)
        elif type(items) is not tuple:
            return reference.put_batches(txn, batches)
        if type(db) is not lmdb._Database:
            return reference.put_batches(txn, batches)
        d = <fmq_DbObject *><PyObject *>db
        if not d.valid or d.env != <void *>t.env:
            return reference.put_batches(txn, batches)
        for item in items:
            if not (PyTuple_CheckExact(item) and PyTuple_GET_SIZE(item) == 2
                    and PyBytes_CheckExact(<object>PyTuple_GET_ITEM(item, 0))
                    and PyBytes_CheckExact(<object>PyTuple_GET_ITEM(item, 1))):
                return reference.put_batches(txn, batches)
        total += len(items)
        held.append((db, items))
    if t.env.resizing and t.env.resize_tid != PyThread_get_thread_ident():
        return reference.put_batches(txn, batches)  # it says EINVAL, as py-lmdb does
    return _put_held(txn, t, held, total)


cdef list _put_held(object txn, fmq_TransObject *t, list held, Py_ssize_t total):
    cdef Py_ssize_t ndb = len(held)
    cdef fmq_MDB_val *vals = <fmq_MDB_val *>malloc((2 * total + 1) * sizeof(fmq_MDB_val))
    cdef fmq_MDB_dbi *dbis = <fmq_MDB_dbi *>malloc((ndb + 1) * sizeof(fmq_MDB_dbi))
    cdef Py_ssize_t *counts = <Py_ssize_t *>malloc((3 * ndb + 1) * sizeof(Py_ssize_t))
    if vals == NULL or dbis == NULL or counts == NULL:
        free(vals)
        free(dbis)
        free(counts)
        raise MemoryError()
    cdef Py_ssize_t *added = counts + ndb
    cdef Py_ssize_t *done = counts + 2 * ndb
    cdef Py_ssize_t i, j, at = 0, failed_db = -1, failed_item = -1
    cdef object key, value
    cdef int rc = 0
    cdef const fmq_MdbApi *V = t.libv
    cdef fmq_MDB_txn *mtxn = t.txn
    cdef fmq_EnvObject *env = t.env
    cdef fmq_MDB_cursor *cursor
    try:
        for i in range(ndb):
            db, items = held[i]
            dbis[i] = (<fmq_DbObject *><PyObject *>db).dbi
            counts[i] = PyTuple_GET_SIZE(items)
            added[i] = 0
            done[i] = 0
            for item in items:
                key = <object>PyTuple_GET_ITEM(item, 0)
                value = <object>PyTuple_GET_ITEM(item, 1)
                vals[at].mv_size = <size_t>PyBytes_GET_SIZE(key)
                vals[at].mv_data = PyBytes_AS_STRING(key)
                vals[at + 1].mv_size = <size_t>PyBytes_GET_SIZE(value)
                vals[at + 1].mv_data = PyBytes_AS_STRING(value)
                at += 2
        fmq_active_ops_inc(env)
        with nogil:
            at = 0
            for i in range(ndb):
                rc = V.cursor_open(mtxn, dbis[i], &cursor)
                if rc:
                    failed_db = i
                    break
                for j in range(counts[i]):
                    rc = V.cursor_put(cursor, &vals[at], &vals[at + 1], 0)
                    at += 2
                    done[i] += 1
                    if rc == 0:
                        added[i] += 1
                    elif rc != FMQ_MDB_KEYEXIST:
                        failed_db = i
                        failed_item = j
                        break
                    rc = 0
                V.cursor_close(cursor)
                if rc:
                    break
        fmq_active_ops_dec(env)
        for i in range(ndb):
            t.mutations += <int>done[i]
        if rc:
            if failed_item < 0:
                raise _lmdb_error("mdb_cursor_open", rc)
            raise _lmdb_error(f"mdb_cursor_put() element #{failed_item}", rc)
        return [(counts[i], added[i]) for i in range(ndb)]
    finally:
        free(vals)
        free(dbis)
        free(counts)


cdef object _lmdb_error(str what, int rc):
    """py-lmdb's exception for ``rc`` (its class, message and attributes, as ``err_set``)."""
    cdef const char *text = _newest.strerror_fn(rc)
    reason = text.decode("utf-8", "replace")
    hint = _HINTS.get(rc)
    cls = getattr(lmdb, _ERROR_CLASSES.get(rc, "Error"), lmdb.Error)
    exc = cls(f"{what}: {reason} ({hint})" if hint else f"{what}: {reason}")
    exc.what = what
    exc.code = rc
    exc.reason = reason
    return exc


# ---------------------------------------------------------------------- the layout check

def _refusal() -> str:
    """Why the mirrored layout is not this process's py-lmdb ("" when it is)."""
    if not FMQ_LAYOUT_BUILT:
        return "the direct path is not built on this platform"
    version = getattr(lmdb, "__version__", "?")
    if version not in KNOWN_RELEASES:
        return (f"py-lmdb {version} is not a release whose layout this build mirrors "
                f"({', '.join(KNOWN_RELEASES)})")
    heap_type = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python (the cffi one)
    sizes = ((lmdb.Transaction, sizeof(fmq_TransObject)), (lmdb._Database, sizeof(fmq_DbObject)),
             (lmdb.Environment, sizeof(fmq_EnvObject)))
    for cls, size in sizes:
        if cls.__flags__ & heap_type:
            return f"py-lmdb runs its cffi implementation ({cls.__module__})"
        if cls.__basicsize__ != size:
            return (f"py-lmdb's {cls.__name__} has {cls.__basicsize__} bytes, the mirrored "
                    f"layout {size}: another build of py-lmdb {version}")
    engines = []
    for major in (0, 1):
        try:
            engines.append((major, lmdb.version(lib_version=major)))
        except lmdb.Error:  # this build has no such engine
            continue
    if not engines:
        return "py-lmdb names none of its engines"
    try:
        with tempfile.TemporaryDirectory(prefix="fmq-lmdb-layout-") as scratch:
            for major, numbers in engines:
                why = _probe(os.path.join(scratch, str(major)), major, tuple(numbers))
                if why:
                    return why
    except (lmdb.Error, OSError) as exc:
        return f"the probe of py-lmdb's layout failed: {exc!r}"
    return ""


cdef str _probe(str path, int major, tuple numbers):
    """Reads through the mirror what py-lmdb says of a scratch environment of engine
    ``major``, writes through it, and reads back with py-lmdb ("" when all agree)."""
    global _newest
    cdef int a = -1, b = -1, c = -1
    cdef const char *text = NULL
    cdef unsigned int flags = 0xFFFFFFFF
    cdef fmq_EnvObject *e
    cdef fmq_DbObject *d
    cdef fmq_TransObject *t
    cdef fmq_TransObject *r
    cdef const fmq_MdbApi *V
    env = lmdb.open(path, map_size=1 << 20, max_dbs=2, lib_version=major, sync=False,
                    metasync=False)
    try:
        e = <fmq_EnvObject *><PyObject *>env
        if tuple(env.lib_version()) != numbers:
            return f"engine {major}: the environment took engine {env.lib_version()}"
        if not (e.valid == 1 and e.readonly == 0 and e.pid == os.getpid()
                and e.write_txn_tid == 0 and e.open_keys != NULL
                and PyTuple_CheckExact(<object>e.open_keys) and e.ops_sync_ready == 1
                and fmq_load_int(&e.active_ops) == 0 and fmq_load_int(&e.ops_waiters) == 0
                and fmq_load_int(&e.write_begins) == 0 and e.resizing == 0):
            return f"engine {major}: the Environment's fields are not where they are mirrored"
        V = e.libv
        if (V.major, V.minor, V.patch) != numbers or V.data_version not in (1, 3):
            return f"engine {major}: its table names another version"
        text = V.version_fn(&a, &b, &c)
        if (a, b, c) != numbers or text == NULL or not (<bytes>text).startswith(b"LMDB "):
            return f"engine {major}: its version function is not where it is mirrored"
        text = NULL
        if V.env_get_path(e.env, &text) != 0 or text == NULL \
                or (<bytes>text).decode() != env.path():
            return f"engine {major}: its environment path is not where it is mirrored"
        probe_db, other_db = env.open_db(b"probe"), env.open_db(b"other")
        d = <fmq_DbObject *><PyObject *>probe_db
        if d.valid != 1 or d.env != <void *>e or d.dbi < 2 or d.flags != 0:
            return f"engine {major}: the _Database's fields are not where they are mirrored"
        txn = env.begin(write=True)
        t = <fmq_TransObject *><PyObject *>txn
        if not (t.valid == 1 and t.env == e and t.parent == NULL and t.libv == V
                and t.flags == 0 and t.mutations == 0 and t.db == e.main_db
                and e.write_txn_tid == PyThread_get_thread_ident()
                and V.txn_id(t.txn) == txn.id()
                and V.dbi_flags(t.txn, d.dbi, &flags) == 0 and flags == d.flags):
            txn.abort()
            return f"engine {major}: the Transaction's fields are not where they are mirrored"
        txn.put(b"a", b"1", db=probe_db)
        if t.mutations != 1:
            txn.abort()
            return f"engine {major}: the Transaction's mutation count is not where mirrored"
        _newest = V  # the engines come oldest first: the last probed is the newest
        got = _put_held(txn, t, [(probe_db, ((b"b", b"2"), (b"a", b"3"))), (other_db, ())], 2)
        if got != [(2, 2), (0, 0)] or t.mutations != 3 or fmq_load_int(&e.active_ops) != 0:
            txn.abort()
            return f"engine {major}: a put through the mirror did not do what py-lmdb does"
        txn.commit()
        if t.valid != 0 or e.write_txn_tid != 0:
            return f"engine {major}: the commit did not end the transaction as mirrored"
        with env.begin() as read:
            r = <fmq_TransObject *><PyObject *>read
            if not r.flags & FMQ_TRANS_RDONLY:
                return f"engine {major}: a read transaction's flags are not where mirrored"
            if (read.get(b"a", db=probe_db), read.get(b"b", db=probe_db),
                    read.stat(other_db)["entries"]) != (b"3", b"2", 0):
                return f"engine {major}: py-lmdb did not read back what the mirror put"
        return ""
    finally:
        env.close()
