/*
 * interop._speedups: the optional compiled fast path (CPython C API only).
 *
 * The pure-Python twin is interop/routes.py and interop/api.py; the whole test suite runs
 * both ways (INTEROP_PURE_PYTHON=1 switches this module off). What is here:
 *
 *   fingerprint(capsule) -> int   every fact of a DLPack capsule a plan depends on, packed
 *                                 into one integer (-1: not a valid, unconsumed capsule)
 *   describe(capsule) -> tuple    the capsule's whole description in one call
 *   Route(...)                    a remembered route: guards, export (through the DLPack C
 *                                 exchange API of the type Python names), fingerprint,
 *                                 lookup, the bridge Python asks for, import (through the
 *                                 exchange API of the type Python names); it decides nothing
 *                                 the plan did not say: any surprise returns None and the
 *                                 caller takes the full path, which raises the typed errors
 *   Front(table, slow)            `interop.convert` itself: argument checks, the two lookups
 *                                 (source type, then target) and the route, else `slow`
 *   aligned_handler() -> capsule  NumPy's allocator hook (NEP 49) placing array data 64-byte
 *                                 aligned, which JAX and TensorFlow share (interop/aligned.py)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

/* ---- DLPack's ABI (major version 1), as this module reads it ------------------------- */
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct Legacy {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct Legacy *);
} Legacy;
typedef struct { uint32_t major; uint32_t minor; } Version;
typedef struct Versioned {
    Version version;
    void *manager_ctx;
    void (*deleter)(struct Versioned *);
    uint64_t flags;
    DLTensor dl_tensor;
} Versioned;
/* The DLPack 1.3 C exchange API: `type(x).__dlpack_c_exchange_api__`, a capsule named
 * "dlpack_exchange_api" holding a static table of function pointers. */
typedef struct ApiHeader { Version version; struct ApiHeader *prev_api; } ApiHeader;
typedef struct {
    ApiHeader header;
    void *managed_tensor_allocator;
    int (*from_py)(void *py_object, Versioned **out);
    int (*to_py)(Versioned *tensor, void **out_py_object);
    void *dltensor_from_py;
    void *current_work_stream;
} ExchangeApi;

static const char LEGACY_NAME[] = "dltensor";
static const char VERSIONED_NAME[] = "dltensor_versioned";
static const char USED_VERSIONED_NAME[] = "used_dltensor_versioned";
#define FLAG_READ_ONLY 1u

/* ---- reading a tensor ---------------------------------------------------------------- */
enum { CANONICAL, CONTIGUOUS, PERMUTED, STRIDED, BROADCAST, NEGATIVE, INVALID };

/* The layout class, exactly as interop.info.classify_layout computes it. */
static int
layout_class(const DLTensor *t)
{
    int ndim = t->ndim, i, j, n = 0;
    int64_t canonical[64], step = 1, ext[64], str[64];
    if (ndim < 0 || ndim > 64) return INVALID;
    if (ndim == 0 || t->strides == NULL) return CANONICAL;
    for (i = ndim - 1; i >= 0; i--) {
        canonical[i] = step;
        step *= t->shape[i] > 1 ? t->shape[i] : 1;
    }
    if (memcmp(canonical, t->strides, sizeof(int64_t) * ndim) == 0) return CANONICAL;
    for (i = 0; i < ndim; i++)
        if (t->shape[i] == 0) return CONTIGUOUS;
    for (i = 0; i < ndim; i++)
        if (t->shape[i] != 1 && t->strides[i] < 0) return NEGATIVE;
    for (i = 0; i < ndim; i++)
        if (t->shape[i] > 1 && t->strides[i] == 0) return BROADCAST;
    for (i = 0; i < ndim; i++)
        if (t->shape[i] != 1 && t->strides[i] != canonical[i]) break;
    if (i == ndim) return CONTIGUOUS;
    for (i = 0; i < ndim; i++) {  /* the long dimensions, sorted by stride (stable) */
        if (t->shape[i] == 1) continue;
        for (j = n; j > 0 && str[j - 1] > t->strides[i]; j--) {
            str[j] = str[j - 1];
            ext[j] = ext[j - 1];
        }
        str[j] = t->strides[i];
        ext[j] = t->shape[i];
        n++;
    }
    for (step = 1, i = 0; i < n; i++) {
        if (str[i] != step) return STRIDED;
        step *= ext[i];
    }
    return PERMUTED;
}

#define READ_ONLY_BIT 43  /* of the packed facts: the capsule's READ_ONLY flag */

/* Every fact a plan depends on, packed into one integer; -1 when the tensor is malformed
 * (the full path then says what is wrong) or cannot be keyed exactly. */
static long long
pack_facts(const DLTensor *t, int versioned, int read_only, int deleter, int ctx, int major)
{
    int i, layout, log2 = 0;
    int64_t size = 1;
    uint64_t address, align;
    unsigned long long fp;
    if (t->ndim < 0 || t->ndim > 64 || (t->ndim > 0 && t->shape == NULL)) return -1;
    if (t->dtype.bits == 0 || t->dtype.lanes == 0 || t->dtype.lanes > 255) return -1;
    if (t->device.device_type < 0 || t->device.device_type > 255) return -1;
    if (t->device.device_id < 0 || t->device.device_id > 255 || major != 1) return -1;
    for (i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) return -1;
        size *= t->shape[i];
    }
    if (size > 0 && t->data == NULL) return -1;
    layout = layout_class(t);
    address = (uint64_t)(uintptr_t)t->data + t->byte_offset;
    align = address ? (address & (~address + 1)) : 64;
    if (align > 64) align = 64;
    while ((1ull << log2) < align) log2++;
    fp = (unsigned long long)t->dtype.code
         | (unsigned long long)t->dtype.bits << 8
         | (unsigned long long)t->dtype.lanes << 16
         | (unsigned long long)t->device.device_type << 24
         | (unsigned long long)t->device.device_id << 32
         | (unsigned long long)layout << 40
         | (unsigned long long)(read_only != 0) << READ_ONLY_BIT
         | (unsigned long long)(t->byte_offset != 0) << 44
         | (unsigned long long)log2 << 45
         | (unsigned long long)(t->ndim == 0 ? 3 : size == 0 ? 0 : size == 1 ? 1 : 2) << 48
         | (unsigned long long)(versioned != 0) << 50
         | (unsigned long long)(deleter != 0) << 51
         | (unsigned long long)(ctx != 0) << 52;
    return (long long)fp;
}

static long long
versioned_facts(const Versioned *m)
{
    return pack_facts(&m->dl_tensor, 1, (m->flags & FLAG_READ_ONLY) != 0, m->deleter != NULL,
                      m->manager_ctx != NULL, (int)m->version.major);
}

/* The fingerprint of an unconsumed DLPack capsule of either kind, or -1. */
static long long
capsule_facts(PyObject *capsule, int *versioned)
{
    const char *name;
    void *pointer;
    if (!PyCapsule_CheckExact(capsule)) return -1;
    name = PyCapsule_GetName(capsule);
    if (name == NULL) { PyErr_Clear(); return -1; }
    if (strcmp(name, VERSIONED_NAME) == 0) {
        pointer = PyCapsule_GetPointer(capsule, VERSIONED_NAME);
        if (pointer == NULL) { PyErr_Clear(); return -1; }
        *versioned = 1;
        return versioned_facts((Versioned *)pointer);
    }
    if (strcmp(name, LEGACY_NAME) == 0) {
        Legacy *m = (Legacy *)PyCapsule_GetPointer(capsule, LEGACY_NAME);
        if (m == NULL) { PyErr_Clear(); return -1; }
        *versioned = 0;
        return pack_facts(&m->dl_tensor, 0, 0, m->deleter != NULL, m->manager_ctx != NULL, 1);
    }
    return -1;
}

static PyObject *
fingerprint(PyObject *module, PyObject *capsule)
{
    int versioned = 0;
    return PyLong_FromLongLong(capsule_facts(capsule, &versioned));
}

static PyObject *
int64_tuple(const int64_t *values, int n)
{
    int i;
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (i = 0; i < n; i++) {
        PyObject *item = PyLong_FromLongLong(values[i]);
        if (item == NULL) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, i, item);
    }
    return out;
}

/* (data, device type, device id, ndim, code, bits, lanes, shape, strides or None,
 *  byte_offset, version or None, flags, has deleter, has manager_ctx) of an unconsumed
 * capsule; raises ValueError naming the capsule's name otherwise. */
static PyObject *
describe(PyObject *module, PyObject *capsule)
{
    const char *name;
    const DLTensor *t;
    PyObject *version = Py_None, *shape = NULL, *strides = NULL, *out;
    unsigned long long flags = 0;
    int deleter, ctx;
    if (!PyCapsule_CheckExact(capsule)) {
        PyErr_SetString(PyExc_TypeError, "not a capsule");
        return NULL;
    }
    name = PyCapsule_GetName(capsule);
    if (name != NULL && strcmp(name, VERSIONED_NAME) == 0) {
        Versioned *m = (Versioned *)PyCapsule_GetPointer(capsule, VERSIONED_NAME);
        if (m == NULL) return NULL;
        t = &m->dl_tensor;
        flags = m->flags;
        deleter = m->deleter != NULL;
        ctx = m->manager_ctx != NULL;
        version = Py_BuildValue("(II)", m->version.major, m->version.minor);
        if (version == NULL) return NULL;
        if (m->version.major != 1) {  /* the rest of the struct may differ: read no further */
            out = Py_BuildValue("(KiiiiiiOOKNKii)", 0ull, 0, 0, 0, 0, 0, 0, Py_None, Py_None,
                                0ull, version, flags, deleter, ctx);
            return out;
        }
    } else if (name != NULL && strcmp(name, LEGACY_NAME) == 0) {
        Legacy *m = (Legacy *)PyCapsule_GetPointer(capsule, LEGACY_NAME);
        if (m == NULL) return NULL;
        t = &m->dl_tensor;
        deleter = m->deleter != NULL;
        ctx = m->manager_ctx != NULL;
        Py_INCREF(version);
    } else {
        PyErr_Format(PyExc_ValueError, "not an unconsumed DLPack capsule: %s",
                     name ? name : "(no name)");
        return NULL;
    }
    if (t->ndim < 0 || t->ndim > 64 || (t->ndim > 0 && t->shape == NULL)) {
        shape = Py_None;
        Py_INCREF(shape);
    } else {
        shape = int64_tuple(t->shape, t->ndim);
    }
    if (shape == NULL) { Py_DECREF(version); return NULL; }
    if (shape == Py_None || t->strides == NULL || t->ndim == 0) {
        strides = Py_None;
        Py_INCREF(strides);
    } else {
        strides = int64_tuple(t->strides, t->ndim);
        if (strides == NULL) { Py_DECREF(version); Py_DECREF(shape); return NULL; }
    }
    out = Py_BuildValue("(KiiiiiiNNKNKii)", (unsigned long long)(uintptr_t)t->data,
                        t->device.device_type, t->device.device_id, t->ndim, t->dtype.code,
                        t->dtype.bits, t->dtype.lanes, shape, strides,
                        (unsigned long long)t->byte_offset, version, flags, deleter, ctx);
    return out;
}

/* ---- deleters that keep a raised exception ------------------------------------------------
 * A consumer frees a tensor whenever its last reference goes, also while an exception is
 * being raised; Python code run then (a ctypes callback) makes CPython replace the exception
 * with a SystemError. These C deleters save the exception around whatever they run. */
static PyObject *release_fn = NULL;  /* interop.capsule._release(address) */

static void
keepalive_deleter(void *managed)
{
    PyGILState_STATE gil;
    PyObject *type, *value, *traceback, *done;
    if (!Py_IsInitialized() || release_fn == NULL) return;
    gil = PyGILState_Ensure();
    PyErr_Fetch(&type, &value, &traceback);
    done = PyObject_CallFunction(release_fn, "K", (unsigned long long)(uintptr_t)managed);
    if (done == NULL) PyErr_WriteUnraisable(release_fn);
    Py_XDECREF(done);
    PyErr_Restore(type, value, traceback);
    PyGILState_Release(gil);
}

/* The destructor of an unconsumed capsule: release the tensor it still owns. */
static void
capsule_destructor(PyObject *capsule)
{
    PyObject *type, *value, *traceback;
    const char *name;
    PyErr_Fetch(&type, &value, &traceback);
    name = PyCapsule_GetName(capsule);
    if (name != NULL && strcmp(name, VERSIONED_NAME) == 0) {
        Versioned *m = (Versioned *)PyCapsule_GetPointer(capsule, VERSIONED_NAME);
        if (m != NULL && m->deleter != NULL) m->deleter(m);
    } else if (name != NULL && strcmp(name, LEGACY_NAME) == 0) {
        Legacy *m = (Legacy *)PyCapsule_GetPointer(capsule, LEGACY_NAME);
        if (m != NULL && m->deleter != NULL) m->deleter(m);
    }
    PyErr_Clear();
    PyErr_Restore(type, value, traceback);
}

static PyObject *
trampolines(PyObject *module, PyObject *release)
{
    if (!PyCallable_Check(release)) {
        PyErr_SetString(PyExc_TypeError, "trampolines(release): release must be callable");
        return NULL;
    }
    Py_INCREF(release);
    Py_XSETREF(release_fn, release);
    return Py_BuildValue("(KK)", (unsigned long long)(uintptr_t)keepalive_deleter,
                         (unsigned long long)(uintptr_t)capsule_destructor);
}

/* The exchange API table of `type`, which Python said to use (None: NULL, no error); NULL
 * with TypeError where the type has none it can use (its adapter's declaration is wrong). */
static ExchangeApi *
exchange_api(PyObject *type)
{
    PyObject *holder;
    ExchangeApi *api = NULL;
    if (type == Py_None) return NULL;
    holder = PyType_Check(type)
        ? PyObject_GetAttrString(type, "__dlpack_c_exchange_api__") : NULL;
    if (holder != NULL && PyCapsule_IsValid(holder, "dlpack_exchange_api"))
        api = (ExchangeApi *)PyCapsule_GetPointer(holder, "dlpack_exchange_api");
    Py_XDECREF(holder);  /* the table is static in the framework: it outlives the capsule */
    if (api == NULL || api->header.version.major != 1 || api->from_py == NULL
        || api->to_py == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%R has no DLPack 1.x C exchange API to route through",
                     type);
        return NULL;
    }
    return api;
}

/* ---- releases deferred to a thread of our own ------------------------------------------------
 * Paddle 3.3 runs an import's deleter while holding a lock of its own, and takes that lock in
 * from_dlpack while holding the GIL: a deleter that needs the GIL (torch's, NumPy's, ours)
 * or Paddle's lock again deadlocks. A capsule for such a consumer wraps the producer's tensor
 * in a Box whose deleter only queues it (no GIL, no lock but ours); a C thread releases the
 * queued tensors, each through its own deleter, which takes the GIL itself if it needs it. */
typedef struct Box {
    union { Legacy legacy; Versioned versioned; } outer;  /* first: the consumer's pointer */
    void *inner;
    int inner_versioned;
    int deferred;  /* released by our thread (else at once: a bridge between capsule kinds) */
    void *claimed;  /* the data address this box claims while its consumer holds it, or NULL */
    struct Box *next;
} Box;

static PyThread_type_lock queue_mutex = NULL, queue_wake = NULL;
static Box *queue_head = NULL;
static int queue_sleeping = 0;
static long queue_pending = 0;  /* queued or being released (not those a consumer holds) */
static int releaser_started = 0;
/* Set at exit (stop_releasing, before the interpreter finalizes): the thread releases nothing
 * more, and a deferred box released from then on frees only itself. A thread that takes the
 * GIL once the interpreter finalizes is ended in place (pthread_exit), and one ended inside a
 * C++ deleter (torch's) aborts the process: "terminate called without an active exception".
 * What is released after that point is left to the process's end. */
static int releaser_stopping = 0;
static int releaser_busy = 0;  /* the thread is releasing a box it took */

/* Data addresses claimed by live imports into a consumer that files each import's release
 * under its data address, one per address (Paddle 3.3: a second import of an address replaces
 * the first's release, which then never runs: a leak). A set, by open addressing, guarded by
 * queue_mutex: a consumer's deleter removes its box's address without the GIL. */
#define CLAIM_FREE ((void *)0)
#define CLAIM_GONE ((void *)1)  /* a removed entry: probing goes on past it */
static void **claims = NULL;
static size_t claims_size = 0, claims_filled = 0;  /* filled: live + gone */
static long claims_live = 0;

static size_t
claim_slot(void *address, size_t size)
{
    return (size_t)((((uintptr_t)address >> 4) * (uintptr_t)0x9E3779B97F4A7C15ULL) & (size - 1));
}

/* The slot holding `address`, or -1 (queue_mutex held). */
static Py_ssize_t
claim_find(void *address)
{
    size_t i, n;
    if (claims_size == 0) return -1;
    for (i = claim_slot(address, claims_size), n = 0; n < claims_size;
         i = (i + 1) & (claims_size - 1), n++) {
        if (claims[i] == address) return (Py_ssize_t)i;
        if (claims[i] == CLAIM_FREE) return -1;
    }
    return -1;
}

/* Claim `address`: 1 done, 0 claimed already, -1 out of memory (queue_mutex held). */
static int
claim_add(void *address)
{
    size_t i;
    if (claim_find(address) >= 0) return 0;
    if ((claims_filled + 1) * 2 > claims_size) {  /* grow (or sweep the gone) to half full */
        size_t size = 64, j;
        void **fresh;
        while (size < ((size_t)claims_live + 1) * 4) size *= 2;
        fresh = (void **)PyMem_RawCalloc(size, sizeof(void *));
        if (fresh == NULL) return -1;
        for (j = 0; j < claims_size; j++) {
            void *kept = claims[j];
            if (kept == CLAIM_FREE || kept == CLAIM_GONE) continue;
            for (i = claim_slot(kept, size); fresh[i] != CLAIM_FREE; i = (i + 1) & (size - 1)) {}
            fresh[i] = kept;
        }
        PyMem_RawFree(claims);
        claims = fresh;
        claims_size = size;
        claims_filled = (size_t)claims_live;
    }
    for (i = claim_slot(address, claims_size);
         claims[i] != CLAIM_FREE && claims[i] != CLAIM_GONE; i = (i + 1) & (claims_size - 1)) {}
    if (claims[i] == CLAIM_FREE) claims_filled++;
    claims[i] = address;
    claims_live++;
    return 1;
}

static void
claim_remove(void *address)
{
    Py_ssize_t i;
    PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
    i = claim_find(address);
    if (i >= 0) {
        claims[i] = CLAIM_GONE;
        claims_live--;
    }
    PyThread_release_lock(queue_mutex);
}

static void
box_push(Box *box)
{
    PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
    if (releaser_stopping) {  /* exiting: its tensor is left to the process's end */
        PyThread_release_lock(queue_mutex);
        PyMem_RawFree(box);
        return;
    }
    box->next = queue_head;
    queue_head = box;
    queue_pending++;
    if (queue_sleeping) {
        queue_sleeping = 0;
        PyThread_release_lock(queue_wake);
    }
    PyThread_release_lock(queue_mutex);
}

static void
box_release(Box *box)
{
    if (box->inner_versioned) {
        Versioned *inner = (Versioned *)box->inner;
        if (inner->deleter != NULL) inner->deleter(inner);
    } else {
        Legacy *inner = (Legacy *)box->inner;
        if (inner->deleter != NULL) inner->deleter(inner);
    }
    PyMem_RawFree(box);
}

static void
box_deleter(Box *box)
{
    if (box->claimed != NULL) claim_remove(box->claimed);  /* the consumer let go of it */
    box->claimed = NULL;
    if (box->deferred) box_push(box);
    else box_release(box);
}

static void box_deleter_legacy(Legacy *m) { box_deleter((Box *)m); }
static void box_deleter_versioned(Versioned *m) { box_deleter((Box *)m); }

static void
releaser_main(void *unused)
{
    /* A thread state of its own for good, the GIL released: the deleters it calls that take
     * the GIL (NumPy's, ours) then reuse it instead of making and freeing one each time. */
    PyGILState_STATE gil = PyGILState_Ensure();
    (void)gil;
    (void)PyEval_SaveThread();
    for (;;) {
        Box *box;
        PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
        while (queue_head == NULL || releaser_stopping) {
            if (releaser_stopping) {  /* at exit: never to take the GIL again */
                PyThread_release_lock(queue_mutex);
                for (;;) PyThread_acquire_lock(queue_wake, WAIT_LOCK);
            }
            queue_sleeping = 1;
            PyThread_release_lock(queue_mutex);
            PyThread_acquire_lock(queue_wake, WAIT_LOCK);
            PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
        }
        box = queue_head;  /* one at a time: the rest stays queued, for a forked child too */
        queue_head = box->next;
        releaser_busy = 1;
        PyThread_release_lock(queue_mutex);
        box_release(box);
        PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
        queue_pending--;
        releaser_busy = 0;
        PyThread_release_lock(queue_mutex);
    }
}

/* Release what is queued, here and now (called by conversions, outside any consumer's lock):
 * in a loop of conversions the queue then never grows, whatever the thread's share of the
 * GIL. Taken one at a time, as the thread takes them. */
static void
drain_queue(void)
{
    Box *box = NULL;
    if (!releaser_started || queue_head == NULL) return;  /* (an unlocked peek: a hint) */
    for (;;) {
        PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
        if (box != NULL) queue_pending--;  /* (the one released last) */
        box = queue_head;
        if (box != NULL) queue_head = box->next;
        PyThread_release_lock(queue_mutex);
        if (box == NULL) return;
        box_release(box);
    }
}

static PyObject *
drain_deferred(PyObject *module, PyObject *unused)
{
    drain_queue();
    Py_RETURN_NONE;
}

/* At exit, while the interpreter still runs (an atexit handler): release what is queued here,
 * wait (the GIL released) for a release the thread has in hand, and stop it (see
 * releaser_stopping). */
static PyObject *
stop_releasing(PyObject *module, PyObject *unused)
{
    int waited = 0, busy;
    PyThread_type_lock pause;
    if (!releaser_started) Py_RETURN_NONE;
    drain_queue();
    pause = PyThread_allocate_lock();
    if (pause == NULL) return PyErr_NoMemory();
    PyThread_acquire_lock(pause, WAIT_LOCK);  /* held: a timed acquire of it is a sleep */
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
    releaser_stopping = 1;  /* (a sleeping thread sleeps on; one that wakes parks) */
    busy = releaser_busy;
    PyThread_release_lock(queue_mutex);
    while (busy && waited++ < 10000) {  /* (10 s at most) */
        PyThread_acquire_lock_timed(pause, 1000, 0);
        PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
        busy = releaser_busy;
        PyThread_release_lock(queue_mutex);
    }
    Py_END_ALLOW_THREADS
    PyThread_release_lock(pause);
    PyThread_free_lock(pause);
    drain_queue();  /* what was queued before the flag: nothing is queued after it */
    Py_RETURN_NONE;
}

static int releaser_start(void);

/* In the child of a fork (os.register_at_fork), which has none of the parent's threads: the
 * releasing thread is gone, its locks may be held for good, and its busy flag would make the
 * exit wait its full 10 s. Fresh locks, and a fresh thread where anything is queued (a box
 * being released at the fork, by that thread or a drain, is left to the process's end: its
 * deleter may have run; every other one is still queued). */
static PyObject *
after_fork_child(PyObject *module, PyObject *unused)
{
    Box *box;
    if (!releaser_started) Py_RETURN_NONE;
    releaser_busy = 0;
    queue_sleeping = 0;
    queue_pending = 0;
    for (box = queue_head; box != NULL; box = box->next) queue_pending++;
    releaser_started = 0;  /* (the parent's locks are dropped, not freed: another may hold them) */
    if (releaser_start() < 0) return NULL;
    Py_RETURN_NONE;
}

static int
releaser_start(void)
{
    if (releaser_started) return 0;
    queue_mutex = PyThread_allocate_lock();
    queue_wake = PyThread_allocate_lock();
    if (queue_mutex == NULL || queue_wake == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyThread_acquire_lock(queue_wake, WAIT_LOCK);  /* held: the thread sleeps on it */
    if (PyThread_start_new_thread(releaser_main, NULL) == PYTHREAD_INVALID_THREAD_ID) {
        PyErr_SetString(PyExc_RuntimeError, "cannot start the deferred-release thread");
        return -1;
    }
    releaser_started = 1;
    return 0;
}

/* The managed tensor at `inner` (of kind `versioned`) in a Box of kind `outer_versioned`
 * (a bridge when they differ: READ_ONLY set with `read_only`), released by our thread with
 * `deferred`, else at once; with `claim`, its data address is claimed (see claims) until the
 * consumer releases it. NULL with an error set, or with none when the address is claimed
 * already (the caller still owns `inner`). */
static void *
box_new(void *inner, int versioned, int outer_versioned, int deferred, int read_only, int claim)
{
    Box *box;
    const DLTensor *tensor;
    if ((deferred || claim) && releaser_start() < 0) return NULL;
    tensor = versioned ? &((Versioned *)inner)->dl_tensor : &((Legacy *)inner)->dl_tensor;
    box = (Box *)PyMem_RawCalloc(1, sizeof(Box));
    if (box == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (claim && tensor->data != CLAIM_FREE && tensor->data != CLAIM_GONE) {
        int done;  /* (no memory to claim at NULL: a zero-size tensor's) */
        PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
        done = claim_add(tensor->data);
        PyThread_release_lock(queue_mutex);
        if (done != 1) {
            PyMem_RawFree(box);
            if (done < 0) PyErr_NoMemory();
            return NULL;
        }
        box->claimed = tensor->data;
    }
    box->inner = inner;
    box->inner_versioned = versioned;
    box->deferred = deferred;
    if (outer_versioned) {
        if (versioned) box->outer.versioned = *(Versioned *)inner;
        else {
            box->outer.versioned.version.major = 1;
            box->outer.versioned.version.minor = 3;
            box->outer.versioned.flags = read_only ? FLAG_READ_ONLY : 0;
            box->outer.versioned.dl_tensor = *tensor;
        }
        box->outer.versioned.manager_ctx = box;
        box->outer.versioned.deleter = box_deleter_versioned;
    } else {
        box->outer.legacy.dl_tensor = *tensor;
        box->outer.legacy.manager_ctx = box;
        box->outer.legacy.deleter = box_deleter_legacy;
    }
    return box;
}

/* `capsule` re-wrapped in a Box (see box_new); the old one is marked used. */
static PyObject *
box_capsule(PyObject *capsule, int outer_versioned, int deferred, int read_only, int claim)
{
    const char *name = PyCapsule_CheckExact(capsule) ? PyCapsule_GetName(capsule) : NULL;
    int versioned;
    void *inner, *box;
    PyObject *fresh;
    if (name != NULL && strcmp(name, VERSIONED_NAME) == 0) versioned = 1;
    else if (name != NULL && strcmp(name, LEGACY_NAME) == 0) versioned = 0;
    else {
        PyErr_SetString(PyExc_ValueError, "not an unconsumed DLPack capsule");
        return NULL;
    }
    inner = PyCapsule_GetPointer(capsule, name);
    if (inner == NULL) return NULL;
    if (outer_versioned < 0) outer_versioned = versioned;
    box = box_new(inner, versioned, outer_versioned, deferred, read_only, claim);
    if (box == NULL) return NULL;  /* (no error set: claimed already) */
    fresh = PyCapsule_New(box, outer_versioned ? VERSIONED_NAME : LEGACY_NAME,
                          capsule_destructor);
    if (fresh == NULL || PyCapsule_SetName(capsule, versioned ? USED_VERSIONED_NAME
                                                               : "used_dltensor") != 0) {
        if (fresh == NULL) {  /* the old capsule still owns the tensor */
            if (((Box *)box)->claimed != NULL) claim_remove(((Box *)box)->claimed);
            PyMem_RawFree(box);
        }
        Py_XDECREF(fresh);
        return NULL;
    }
    return fresh;
}

/* defer_release(capsule, claim=False) -> a capsule of the same kind over the same tensor whose
 * release is deferred to the releasing thread; the old capsule is marked used. With `claim`,
 * None (the capsule untouched) when another live import claims its data address. */
static PyObject *
defer_release(PyObject *module, PyObject *args)
{
    PyObject *capsule, *fresh;
    int claim = 0;
    if (!PyArg_ParseTuple(args, "O|p:defer_release", &capsule, &claim)) return NULL;
    fresh = box_capsule(capsule, -1, 1, 0, claim);
    if (fresh == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return fresh;
}

/* address_claimed(address) -> bool: whether a live import claims this data address. */
static PyObject *
address_claimed(PyObject *module, PyObject *address)
{
    void *p = PyLong_AsVoidPtr(address);
    Py_ssize_t found = -1;
    if (p == NULL && PyErr_Occurred()) return NULL;
    if (releaser_started && p != CLAIM_FREE && p != CLAIM_GONE) {
        PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
        found = claim_find(p);
        PyThread_release_lock(queue_mutex);
    }
    return PyBool_FromLong(found >= 0);
}

/* A counter the queue lock guards, read under it (0 before the thread's first start). */
static PyObject *
read_counter(const long *counter)
{
    long value = 0;
    if (releaser_started) {
        PyThread_acquire_lock(queue_mutex, WAIT_LOCK);
        value = *counter;
        PyThread_release_lock(queue_mutex);
    }
    return PyLong_FromLong(value);
}

/* claimed_addresses() -> int: how many data addresses live imports claim (for leak tests). */
static PyObject *
claimed_addresses(PyObject *module, PyObject *unused)
{
    return read_counter(&claims_live);
}

static PyObject *
deferred_pending(PyObject *module, PyObject *unused)
{
    return read_counter(&queue_pending);
}

/* ---- Held: a capsule behind __dlpack__, for importers that take objects ----------------- */
typedef struct {
    PyObject_HEAD
    PyObject *capsule;
    int device_type, device_id;
} Held;

static PyObject *
held_dlpack(Held *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *capsule = self->capsule;
    if (capsule == NULL) {
        PyErr_SetString(PyExc_BufferError, "this tensor was already handed to a consumer");
        return NULL;
    }
    self->capsule = NULL;  /* the reference goes to the caller */
    return capsule;
}

static PyObject *
held_device(Held *self, PyObject *unused)
{
    return Py_BuildValue("(ii)", self->device_type, self->device_id);
}

static void
held_dealloc(Held *self)
{
    Py_XDECREF(self->capsule);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef held_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))held_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "The capsule (the route chose its kind); the object is empty afterwards."},
    {"__dlpack_device__", (PyCFunction)held_device, METH_NOARGS, "(device type, id)"},
    {NULL},
};

static PyTypeObject HeldType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "interop._speedups.Held",
    .tp_doc = "A capsule behind __dlpack__, for importers that take objects only.",
    .tp_basicsize = sizeof(Held),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)held_dealloc,
    .tp_methods = held_methods,
};

static PyObject *
held_new(PyObject *capsule, int device_type, int device_id)
{
    Held *self = PyObject_New(Held, &HeldType);
    if (self == NULL) return NULL;
    Py_INCREF(capsule);
    self->capsule = capsule;
    self->device_type = device_type;
    self->device_id = device_id;
    return (PyObject *)self;
}

/* ---- routes ---------------------------------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *known;      /* dict: fingerprint -> importer, or (replay,) where the plan copies */
    PyObject *exporter;   /* callable(x) -> capsule */
    PyObject *guards;     /* tuple of (method, allowed set, dtype code or None) */
    int dtype_guards;     /* some guards run after the export, for one dtype code */
    PyObject *ranges;     /* a tuple of objects, truthy while they remember memory */
    PyObject *policy;     /* callable() -> the immutable policy */
    PyObject *share;      /* the policy that lets immutable buffers be shared */
    PyObject *source;     /* the source type (its guards' methods are looked up on it) */
    PyObject *export_type; /* the type whose exchange API exports (Python's word), or NULL */
    ExchangeApi *export_api;
    ExchangeApi *import_api;  /* the target type's, where Python said the import uses it */
    PyObject *import_guard; /* callable() -> falsy where the exchange import must not run now */
    int guarded, versioned, as_object, defer, claim;
    int bridge, bridge_read_only;  /* -1: none; else the capsule kind the importer takes */
    int legacy_read_only_ok;  /* the bridge may box a READ_ONLY tensor legacy (the plan's word) */
    int min_ndim, max_ndim;        /* the target's bounds on dimensions (-1: no most) */
} Route;

static int
route_traverse(Route *self, visitproc visit, void *arg)
{
    Py_VISIT(self->known);
    Py_VISIT(self->exporter);
    Py_VISIT(self->guards);
    Py_VISIT(self->ranges);
    Py_VISIT(self->policy);
    Py_VISIT(self->share);
    Py_VISIT(self->source);
    Py_VISIT(self->export_type);
    Py_VISIT(self->import_guard);
    return 0;
}

static int
route_clear(Route *self)
{
    Py_CLEAR(self->known);
    Py_CLEAR(self->exporter);
    Py_CLEAR(self->guards);
    Py_CLEAR(self->ranges);
    Py_CLEAR(self->policy);
    Py_CLEAR(self->share);
    Py_CLEAR(self->source);
    Py_CLEAR(self->export_type);
    Py_CLEAR(self->import_guard);
    return 0;
}

static void
route_dealloc(Route *self)
{
    PyObject_GC_UnTrack(self);
    route_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Whether the guards let `x` through (0: take the full path; -1: error). `code` < 0: the
 * guards that run before the export (those without a dtype code); otherwise, after it, those
 * for the exported dtype code `code` (torch's conjugate bit, which only complex tensors carry:
 * the question is not asked of the others). */
static int
guards_pass(Route *self, PyObject *x, long code)
{
    Py_ssize_t i, n = PyTuple_GET_SIZE(self->guards);
    for (i = 0; i < n; i++) {
        PyObject *guard = PyTuple_GET_ITEM(self->guards, i), *check = PyTuple_GET_ITEM(guard, 0);
        PyObject *when = PyTuple_GET_ITEM(guard, 2), *value;
        int ok;
        if (code < 0 ? when != Py_None : when == Py_None || PyLong_AsLong(when) != code)
            continue;
        if (PyUnicode_Check(check))
            value = PyObject_CallMethodNoArgs(x, check);
        else if (Py_TYPE(check)->tp_descr_set != NULL && Py_TYPE(check)->tp_descr_get != NULL)
            /* an attribute (torch's requires_grad): its type's getter, no call */
            value = Py_TYPE(check)->tp_descr_get(check, x, (PyObject *)Py_TYPE(x));
        else
            value = PyObject_CallOneArg(check, x);
        if (value == NULL) return -1;
        ok = PySet_Contains(PyTuple_GET_ITEM(guard, 1), value);
        Py_DECREF(value);
        if (ok != 1) return ok;
    }
    return 1;
}

/* The number of dimensions of an unconsumed capsule of a known kind, or -1. */
static int
capsule_ndim(PyObject *capsule, int versioned)
{
    void *inner = PyCapsule_GetPointer(capsule, versioned ? VERSIONED_NAME : LEGACY_NAME);
    if (inner == NULL) {
        PyErr_Clear();
        return -1;
    }
    return versioned ? ((Versioned *)inner)->dl_tensor.ndim : ((Legacy *)inner)->dl_tensor.ndim;
}

/* The route itself: the converted tensor, or None (with no error set) for the full path. */
static PyObject *
route_run(Route *self, PyObject *x, PyObject *copy)
{
    PyObject *capsule = NULL, *key, *importer = NULL, *result = NULL;
    Versioned *taken = NULL;
    long long facts;
    int versioned = self->versioned, ok, bridge;
    int device_type, device_id;

    drain_queue();
    if (self->import_api != NULL && self->import_guard != NULL) {
        PyObject *now = PyObject_CallNoArgs(self->import_guard);
        ok = now == NULL ? -1 : PyObject_IsTrue(now);
        Py_XDECREF(now);
        if (ok != 1) goto miss;  /* the framework's from_dlpack makes something else now */
    }
    {
        Py_ssize_t i;
        for (i = 0; i < PyTuple_GET_SIZE(self->ranges); i++) {
            ok = PyObject_IsTrue(PyTuple_GET_ITEM(self->ranges, i));
            if (ok != 0) goto miss;  /* remembered memory: the full path decides */
        }
    }
    if (self->guarded) {
        PyObject *policy;
        policy = PyObject_CallNoArgs(self->policy);
        if (policy == NULL) goto miss;
        ok = policy == self->share;
        Py_DECREF(policy);
        if (!ok) goto miss;
    }
    if (self->guards != NULL && guards_pass(self, x, -1) != 1) goto miss;
    if (self->export_api != NULL && (PyObject *)Py_TYPE(x) == self->export_type) {
        if (self->export_api->from_py((void *)x, &taken) != 0 || taken == NULL) goto miss;
        facts = versioned_facts(taken);
    } else {
        capsule = PyObject_CallOneArg(self->exporter, x);
        if (capsule == NULL) goto miss;
        facts = capsule_facts(capsule, &versioned);
        if (versioned != self->versioned) facts = -1;
    }
    device_type = (int)((facts >> 24) & 0xff);
    device_id = (int)((facts >> 32) & 0xff);
    key = PyLong_FromLongLong(facts);
    if (key == NULL) goto miss;
    /* a strong reference: the calls below run Python code, which may replace the entry
     * (interop.register clears the routes) while this conversion still needs the importer */
    importer = Py_XNewRef(PyDict_GetItemWithError(self->known, key));
    Py_DECREF(key);
    if (importer == NULL) goto miss;
    if (self->dtype_guards && guards_pass(self, x, (long)(facts & 0xff)) != 1) goto miss;
    if (self->min_ndim > 0 || self->max_ndim >= 0) {
        /* keys do not carry the number of dimensions: the full path refuses a tensor outside
         * the target's bounds beside the plan, before any import takes its memory */
        int ndim = taken != NULL ? taken->dl_tensor.ndim : capsule_ndim(capsule, versioned);
        if (ndim < self->min_ndim || (self->max_ndim >= 0 && ndim > self->max_ndim)) goto miss;
    }
    if (PyTuple_CheckExact(importer)) {
        /* the plan copies (interop.routes.Routes.replay): the capsule only keyed the tensor;
         * replay(x, copy) copies and converts the copy, None where copy=False forbids it */
        PyObject *replay, *args[2] = {x, copy};
        if (PyTuple_GET_SIZE(importer) != 1) goto miss;
        replay = PyTuple_GET_ITEM(importer, 0);
        if (taken != NULL && taken->deleter != NULL) taken->deleter(taken);
        taken = NULL;
        Py_CLEAR(capsule);
        result = PyObject_Vectorcall(replay, args, 2, NULL);
        if (result == NULL) goto miss;
        Py_DECREF(importer);
        return result;
    }
    bridge = self->bridge;  /* the plan's, or Python's for a legacy capsule's exchange import */
    if (self->defer || bridge >= 0) {  /* re-wrapped: deferred, or the other kind */
        if (bridge == 0 && (facts >> READ_ONLY_BIT & 1) && !self->legacy_read_only_ok)
            goto miss;  /* READ_ONLY, which a legacy capsule cannot say: the plan forbids it */
        if (taken != NULL) {  /* versioned, from the exchange API */
            int outer = bridge >= 0 ? bridge : 1;
            void *boxed = box_new(taken, 1, outer, self->defer, self->bridge_read_only,
                                  self->claim);
            if (boxed == NULL) goto miss;
            taken = NULL;
            capsule = PyCapsule_New(boxed, outer ? VERSIONED_NAME : LEGACY_NAME,
                                    capsule_destructor);
            if (capsule == NULL) {
                box_deleter((Box *)boxed);
                goto miss;
            }
        } else {
            PyObject *fresh = box_capsule(capsule, bridge, self->defer, self->bridge_read_only,
                                          self->claim);
            if (fresh == NULL) goto miss;
            Py_SETREF(capsule, fresh);
        }
    }
    if (self->import_api != NULL
        && (taken != NULL || PyCapsule_IsValid(capsule, VERSIONED_NAME))) {  /* in C */
        void *out = NULL;
        if (taken == NULL) {
            taken = (Versioned *)PyCapsule_GetPointer(capsule, VERSIONED_NAME);
            if (taken == NULL || PyCapsule_SetName(capsule, USED_VERSIONED_NAME) != 0) {
                taken = NULL;
                goto miss;
            }
        }
        if (self->import_api->to_py(taken, &out) != 0) {
            taken = NULL;  /* stolen even on failure, as the API says */
            goto miss;
        }
        Py_XDECREF(capsule);
        Py_DECREF(importer);
        return (PyObject *)out;
    }
    if (taken != NULL) {
        capsule = PyCapsule_New(taken, VERSIONED_NAME, capsule_destructor);
        if (capsule == NULL) goto miss;
        taken = NULL;
    }
    if (self->as_object) {
        PyObject *holder = held_new(capsule, device_type, device_id);
        if (holder == NULL) goto miss;
        result = PyObject_CallOneArg(importer, holder);
        Py_DECREF(holder);
    } else {
        result = PyObject_CallOneArg(importer, capsule);
    }
    if (result == NULL) goto miss;
    Py_DECREF(capsule);
    Py_DECREF(importer);
    return result;

miss:
    /* An Exception sends the conversion to the full path, which raises the typed errors; any
     * other BaseException (KeyboardInterrupt, SystemExit) reaches the caller, exactly as the
     * pure route's `except Exception` lets it through. */
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (taken != NULL && taken->deleter != NULL) taken->deleter(taken);
        Py_XDECREF(capsule);
        Py_XDECREF(importer);
        PyErr_Restore(type, value, traceback);
        return NULL;
    }
    PyErr_Clear();
    if (taken != NULL && taken->deleter != NULL) taken->deleter(taken);
    Py_XDECREF(capsule);  /* unconsumed: its destructor frees the tensor */
    Py_XDECREF(importer);
    Py_RETURN_NONE;
}

static PyObject *
route_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "a route takes (x, copy)");
        return NULL;
    }
    return route_run((Route *)callable, args[0], args[1]);
}

static PyObject *
route_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    /* every decision is Python's (the plan's steps, `interop.routes.exchange_route`): the
     * exchange APIs (a type or None), the bridge and its read-only permission */
    static char *names[] = {"known", "exporter", "guards", "ranges", "policy", "share",
                            "source", "export_api", "import_api", "versioned", "as_object",
                            "guarded", "bridge", "bridge_read_only", "legacy_read_only_ok",
                            "defer", "claim", "import_guard", "min_ndim", "max_ndim", NULL};
    PyObject *known, *exporter, *guards, *ranges, *policy, *share, *source, *export_type;
    PyObject *import_type, *import_guard = Py_None;
    int versioned, as_object, guarded, bridge, bridge_read_only, legacy_read_only_ok;
    int defer = 0, claim = 0, min_ndim = 0, max_ndim = -1;
    ExchangeApi *export_api, *import_api;
    Route *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OO!O!OOO!OOpppipp|ppOii", names,
                                     &PyDict_Type, &known, &exporter, &PyTuple_Type, &guards,
                                     &PyTuple_Type, &ranges, &policy, &share, &PyType_Type,
                                     &source, &export_type, &import_type, &versioned,
                                     &as_object, &guarded, &bridge, &bridge_read_only,
                                     &legacy_read_only_ok, &defer, &claim, &import_guard,
                                     &min_ndim, &max_ndim))
        return NULL;
    if (bridge < -1 || bridge > 1) {
        PyErr_SetString(PyExc_ValueError, "bridge must be -1 (none), 0 (legacy) or 1 (versioned)");
        return NULL;
    }
    export_api = exchange_api(export_type);
    if (export_api == NULL && PyErr_Occurred()) return NULL;
    import_api = exchange_api(import_type);
    if (import_api == NULL && PyErr_Occurred()) return NULL;
    {
        Py_ssize_t i;
        for (i = 0; i < PyTuple_GET_SIZE(guards); i++) {
            PyObject *pair = PyTuple_GET_ITEM(guards, i);
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) < 2 || PyTuple_GET_SIZE(pair) > 3
                || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))
                || !PyAnySet_Check(PyTuple_GET_ITEM(pair, 1))
                || (PyTuple_GET_SIZE(pair) == 3 && !PyLong_Check(PyTuple_GET_ITEM(pair, 2)))) {
                PyErr_SetString(PyExc_TypeError,
                                "guards must be (attribute name, allowed values set) pairs, "
                                "or triples ending with the DLPack dtype code they are for");
                return NULL;
            }
        }
    }
    self = (Route *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = route_vectorcall;
    Py_INCREF(known); self->known = known;
    Py_INCREF(exporter); self->exporter = exporter;
    if (PyTuple_GET_SIZE(guards)) {
        /* each method or attribute looked up once on the source type (routes hold exact
         * types only): a call of the descriptor (an attribute's getter) skips the per-call
         * attribute lookup */
        Py_ssize_t i, n = PyTuple_GET_SIZE(guards);
        self->guards = PyTuple_New(n);
        if (self->guards == NULL) {
            Py_DECREF(self);
            return NULL;
        }
        for (i = 0; i < n; i++) {
            PyObject *pair = PyTuple_GET_ITEM(guards, i), *name = PyTuple_GET_ITEM(pair, 0);
            PyObject *method = PyObject_GetAttr(source, name);
            if (method == NULL) {
                PyErr_Clear();
                method = Py_NewRef(name);  /* looked up on each tensor, as before */
            }
            PyObject *when = PyTuple_GET_SIZE(pair) == 3 ? PyTuple_GET_ITEM(pair, 2) : Py_None;
            if (when != Py_None) self->dtype_guards = 1;
            PyTuple_SET_ITEM(self->guards, i, Py_BuildValue("(NOO)", method,
                                                            PyTuple_GET_ITEM(pair, 1), when));
            if (PyTuple_GET_ITEM(self->guards, i) == NULL) {
                Py_DECREF(self);
                return NULL;
            }
        }
    }
    Py_INCREF(ranges); self->ranges = ranges;
    Py_INCREF(policy); self->policy = policy;
    Py_INCREF(share); self->share = share;
    Py_INCREF(source); self->source = source;
    self->versioned = versioned;
    self->as_object = as_object;
    self->guarded = guarded;
    self->defer = defer;
    self->claim = claim;
    self->bridge = bridge;
    self->bridge_read_only = bridge_read_only;
    self->legacy_read_only_ok = legacy_read_only_ok;
    self->min_ndim = min_ndim;
    self->max_ndim = max_ndim;
    self->export_api = export_api;
    if (export_api != NULL) self->export_type = Py_NewRef(export_type);
    self->import_api = import_api;
    if (import_guard != Py_None) self->import_guard = Py_NewRef(import_guard);
    return (PyObject *)self;
}

static PyObject *
route_get_apis(Route *self, void *closure)
{
    return Py_BuildValue("(OO)", self->export_api ? Py_True : Py_False,
                         self->import_api ? Py_True : Py_False);
}

static PyGetSetDef route_getset[] = {
    {"exchange_api", (getter)route_get_apis, NULL,
     "(exports through the C exchange API, imports through it)", NULL},
    {NULL},
};

static PyTypeObject RouteType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "interop._speedups.Route",
    .tp_doc = "A remembered route: call it with (x, copy); None means take the full path.",
    .tp_basicsize = sizeof(Route),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = route_new,
    .tp_dealloc = (destructor)route_dealloc,
    .tp_traverse = (traverseproc)route_traverse,
    .tp_clear = (inquiry)route_clear,
    .tp_vectorcall_offset = offsetof(Route, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getset = route_getset,
};

/* ---- the front: interop.convert ----------------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *table;  /* dict: source type -> {to: route} */
    PyObject *slow;   /* the full path: slow(x, to, copy, device, stream) */
    PyObject *dict;   /* __name__, __doc__, __signature__, ... as a function has them */
} Front;

static PyObject *str_copy, *str_device, *str_stream;

static PyObject *
front_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Front *self = (Front *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), i, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *copy = Py_None, *device = Py_None, *stream = Py_None, *routes, *route, *result;
    PyObject *full[5];
    PyObject *dtypes = Py_None;  /* checked casts: always the full path */
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "convert() takes 2 positional arguments (x, to), not %zd",
                     nargs);
        return NULL;
    }
    for (i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
        if (name == str_copy || PyUnicode_Compare(name, str_copy) == 0) copy = value;
        else if (name == str_device || PyUnicode_Compare(name, str_device) == 0) device = value;
        else if (name == str_stream || PyUnicode_Compare(name, str_stream) == 0) stream = value;
        else if (PyUnicode_CompareWithASCIIString(name, "dtypes") == 0) dtypes = value;
        else {
            PyErr_Format(PyExc_TypeError, "convert() got an unexpected keyword argument '%U'",
                         name);
            return NULL;
        }
    }
    if (dtypes != Py_None) {
        PyObject *cast[6] = {args[0], args[1], copy, device, stream, dtypes};
        return PyObject_Vectorcall(self->slow, cast, 6, NULL);
    }
    if (device == Py_None && stream == Py_None && (copy == Py_None || copy == Py_False)) {
        /* strong references: `to`'s hash and the route run Python code, which may clear the
         * table (interop.register) and free what a borrowed reference would still point at */
        routes = Py_XNewRef(PyDict_GetItemWithError(self->table, (PyObject *)Py_TYPE(args[0])));
        if (routes != NULL) {
            route = Py_XNewRef(PyDict_GetItemWithError(routes, args[1]));
            Py_DECREF(routes);
            if (route != NULL) {
                if (Py_IS_TYPE(route, &RouteType)) {
                    result = route_run((Route *)route, args[0], copy);
                } else {
                    PyObject *pair[2] = {args[0], copy};
                    result = PyObject_Vectorcall(route, pair, 2, NULL);
                }
                Py_DECREF(route);
                if (result == NULL) return NULL;
                if (result != Py_None) return result;
                Py_DECREF(result);
            }
        }
        if (PyErr_Occurred()) {  /* an unhashable `to`: the full path says what is wrong */
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;  /* as the pure front */
            PyErr_Clear();
        }
    }
    full[0] = args[0]; full[1] = args[1]; full[2] = copy; full[3] = device; full[4] = stream;
    return PyObject_Vectorcall(self->slow, full, 5, NULL);
}

static PyObject *
front_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *table, *slow;
    Front *self;
    if (!PyArg_ParseTuple(args, "O!O:Front", &PyDict_Type, &table, &slow)) return NULL;
    self = (Front *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = front_vectorcall;
    Py_INCREF(table); self->table = table;
    Py_INCREF(slow); self->slow = slow;
    return (PyObject *)self;
}

static int
front_traverse(Front *self, visitproc visit, void *arg)
{
    Py_VISIT(self->table);
    Py_VISIT(self->slow);
    Py_VISIT(self->dict);
    return 0;
}

static int
front_clear(Front *self)
{
    Py_CLEAR(self->table);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->dict);
    return 0;
}

static void
front_dealloc(Front *self)
{
    PyObject_GC_UnTrack(self);
    front_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef front_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject FrontType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "interop._speedups.Front",
    .tp_doc = "convert(x, to, *, copy=None, device=None, stream=None, dtypes=None)",
    .tp_basicsize = sizeof(Front),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = front_new,
    .tp_dealloc = (destructor)front_dealloc,
    .tp_traverse = (traverseproc)front_traverse,
    .tp_clear = (inquiry)front_clear,
    .tp_vectorcall_offset = offsetof(Front, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dictoffset = offsetof(Front, dict),
    .tp_getset = front_getset,
};

/* ---- 64-byte aligned NumPy memory (NEP 49) ------------------------------------------------
 * A "mem_handler" capsule over NumPy's PyDataMem_Handler (numpy/ndarraytypes.h, version 1;
 * the layout is NumPy's ABI, so no NumPy header is needed). NumPy stores the capsule on every
 * array it allocates with it and frees the array through it, whenever that happens. NumPy may
 * call these functions without the GIL: they touch no Python object. NumPy itself reports each
 * block to tracemalloc (PyTraceMalloc_Track in PyDataMem_UserNEW and its siblings). */
typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} NumpyAllocator;
typedef struct {
    char name[127];
    uint8_t version;
    NumpyAllocator allocator;
} NumpyHandler;

#define DATA_ALIGNMENT 64
/* Just below each block's data: the block malloc gave and the size asked, which realloc
 * needs (NEP 49's realloc is not told the old size). */
typedef struct { void *raw; size_t size; } BlockHead;
#define BLOCK_SLACK (sizeof(BlockHead) + DATA_ALIGNMENT - 1)

static char *
aligned_data(void *raw)
{
    uintptr_t data = (uintptr_t)raw + sizeof(BlockHead);
    return (char *)((data + DATA_ALIGNMENT - 1) & ~(uintptr_t)(DATA_ALIGNMENT - 1));
}

/* As NumPy's own allocator does, blocks of 4 MiB and more ask Linux for transparent huge
 * pages (where it gives them on request only): filling 16 MB took 1.5 times as long without. */
static void
huge_pages(char *data, size_t size)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    uintptr_t start = ((uintptr_t)data + 4095) & ~(uintptr_t)4095;
    if (size >= ((size_t)1 << 22)) madvise((void *)start, (uintptr_t)data + size - start, MADV_HUGEPAGE);
#else
    (void)data;
    (void)size;
#endif
}

static void *
aligned_block(void *raw, size_t size)
{
    char *data;
    if (raw == NULL) return NULL;
    data = aligned_data(raw);
    ((BlockHead *)data)[-1] = (BlockHead){raw, size};
    huge_pages(data, size);
    return data;
}

static void *
aligned_malloc(void *ctx, size_t size)
{
    (void)ctx;
    return size > SIZE_MAX - BLOCK_SLACK ? NULL : aligned_block(malloc(size + BLOCK_SLACK), size);
}

static void *
aligned_calloc(void *ctx, size_t nelem, size_t elsize)
{
    (void)ctx;
    if (elsize && nelem > (SIZE_MAX - BLOCK_SLACK) / elsize) return NULL;
    return aligned_block(calloc(1, nelem * elsize + BLOCK_SLACK), nelem * elsize);
}

/* The block may move (as realloc's may), and the data's offset in it with it: the bytes kept
 * are moved to the new block's aligned place before its head is written over them. */
static void *
aligned_realloc(void *ctx, void *ptr, size_t new_size)
{
    BlockHead head;
    char *raw, *data;
    size_t offset;
    if (ptr == NULL) return aligned_malloc(ctx, new_size);
    if (new_size > SIZE_MAX - BLOCK_SLACK) return NULL;
    head = ((BlockHead *)ptr)[-1];
    offset = (size_t)((char *)ptr - (char *)head.raw);
    raw = realloc(head.raw, new_size + BLOCK_SLACK);
    if (raw == NULL) return NULL; /* the old block stays, as realloc leaves it */
    data = aligned_data(raw);
    if (data != raw + offset)
        memmove(data, raw + offset, head.size < new_size ? head.size : new_size);
    return aligned_block(raw, new_size);
}

static void
aligned_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    (void)size;
    if (ptr != NULL) free(((BlockHead *)ptr)[-1].raw);
}

static NumpyHandler aligned_handler_struct = {
    "interop_aligned_64", 1,
    {NULL, aligned_malloc, aligned_calloc, aligned_realloc, aligned_free},
};
static PyObject *aligned_capsule; /* one for the process: arrays keep references to it */

static PyObject *
aligned_handler(PyObject *self, PyObject *unused)
{
    if (aligned_capsule == NULL) {
        aligned_capsule = PyCapsule_New(&aligned_handler_struct, "mem_handler", NULL);
        if (aligned_capsule == NULL) return NULL;
    }
    return Py_NewRef(aligned_capsule);
}

/* ---- the module ------------------------------------------------------------------------ */
static PyMethodDef methods[] = {
    {"fingerprint", fingerprint, METH_O,
     "fingerprint(capsule) -> int: every fact a plan depends on, packed; -1 if invalid"},
    {"trampolines", trampolines, METH_O,
     "trampolines(release) -> (deleter, destructor): addresses of C functions that call "
     "release(address) for the core's managed tensors, and free unconsumed capsules, with any "
     "exception being raised saved around them"},
    {"defer_release", defer_release, METH_VARARGS,
     "defer_release(capsule, claim=False) -> capsule: the same tensor, released by a thread of "
     "ours (no GIL, no consumer's lock held) once the consumer frees it; with claim, its data "
     "address is claimed until then, and None is returned where it is claimed already"},
    {"address_claimed", address_claimed, METH_O,
     "address_claimed(address) -> bool: whether a live import claims this data address"},
    {"claimed_addresses", claimed_addresses, METH_NOARGS,
     "claimed_addresses() -> int: how many data addresses live imports claim"},
    {"stop_releasing", stop_releasing, METH_NOARGS,
     "stop_releasing(): at exit, release what is queued and stop the releasing thread"},
    {"after_fork_child", after_fork_child, METH_NOARGS,
     "after_fork_child(): in a forked child, start the deferred releases afresh"},
    {"drain_deferred", drain_deferred, METH_NOARGS,
     "drain_deferred(): release every queued tensor now, in this thread"},
    {"deferred_pending", deferred_pending, METH_NOARGS,
     "deferred_pending() -> int: deferred releases not yet done"},
    {"describe", describe, METH_O,
     "describe(capsule) -> tuple: the whole DLPack description of an unconsumed capsule"},
    {"aligned_handler", aligned_handler, METH_NOARGS,
     "aligned_handler() -> capsule: a NEP 49 \"mem_handler\" whose blocks are 64-byte aligned"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "interop._speedups",
    "The optional compiled fast path of interop-hub (see interop/routes.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *m;
    if (PyType_Ready(&RouteType) < 0 || PyType_Ready(&FrontType) < 0
        || PyType_Ready(&HeldType) < 0)
        return NULL;
    str_copy = PyUnicode_InternFromString("copy");
    str_device = PyUnicode_InternFromString("device");
    str_stream = PyUnicode_InternFromString("stream");
    if (!str_copy || !str_device || !str_stream) return NULL;
    m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&RouteType);
    if (PyModule_AddObject(m, "Route", (PyObject *)&RouteType) < 0) return NULL;
    Py_INCREF(&FrontType);
    if (PyModule_AddObject(m, "Front", (PyObject *)&FrontType) < 0) return NULL;
    return m;
}
