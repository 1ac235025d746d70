/* An XLA FFI handler (typed FFI, api_version=1) that runs a bridged function from jax.jit.
 *
 * XLA calls `execute` with a call frame: buffers in, buffers out, and an int64 attribute `key`
 * naming the bridge. The handler takes the GIL and calls the one Python function registered with
 * `set_callback(fn)` as `fn(key, ins, outs)`, where `ins` and `outs` are tuples of
 * `(memoryview, dtype code, shape)` over XLA's own buffers (inputs read-only). A Python exception becomes an XLA error carrying its message: JAX raises it from
 * the jitted call instead of the process aborting.
 *
 * The FFI structs it uses are mirrored in _xla_ffi_abi.h (no jaxlib headers needed to build).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "_xla_ffi_abi.h"

/* -- the handler ------------------------------------------------------------------------- */

static PyObject *callback = NULL; /* fn(key, ins, outs), set once from Python */

static IX_Error *fail(const IX_Api *api, const char *message) {
    IX_ErrorCreateArgs args;
    memset(&args, 0, sizeof args);
    args.struct_size = IX_END_OF(IX_ErrorCreateArgs, errc);
    args.message = message;
    args.errc = IX_ERROR_CODE_INTERNAL;
    return api->error_create(&args);
}

/* Bytes per element of an XLA dtype code; 0 where a buffer of it cannot be viewed. */
static size_t itemsize(int32_t dtype) {
    switch (dtype) {
        case 1: case 2: case 6: /* PRED, S8, U8 */
        case 19: case 20: case 23: case 24: case 25: case 28: case 29: case 33: /* 8-bit floats */
            return 1;
        case 3: case 7: case 10: case 16: return 2; /* S16, U16, F16, BF16 */
        case 4: case 8: case 11: return 4;          /* S32, U32, F32 */
        case 5: case 9: case 12: case 15: return 8; /* S64, U64, F64, C64 */
        case 18: return 16;                         /* C128 */
        default: return 0;
    }
}

/* A tuple (memoryview, dtype code, shape) over one XLA buffer; NULL with an exception set. */
static PyObject *view(const IX_Buffer *buffer, int flags) {
    static char empty[1];
    size_t size = itemsize(buffer->dtype);
    if (size == 0) {
        return PyErr_Format(PyExc_TypeError, "interop's XLA FFI handler: XLA dtype code %d "
                            "has no NumPy view", (int)buffer->dtype);
    }
    PyObject *shape = PyTuple_New((Py_ssize_t)buffer->rank);
    if (shape == NULL) return NULL;
    for (int64_t i = 0; i < buffer->rank; i++) {
        PyObject *d = PyLong_FromLongLong((long long)buffer->dims[i]);
        if (d == NULL) {
            Py_DECREF(shape);
            return NULL;
        }
        PyTuple_SET_ITEM(shape, (Py_ssize_t)i, d);
        size *= (size_t)buffer->dims[i];
    }
    char *data = size != 0 && buffer->data != NULL ? (char *)buffer->data : empty;
    PyObject *memory = PyMemoryView_FromMemory(data, (Py_ssize_t)size, flags);
    if (memory == NULL) {
        Py_DECREF(shape);
        return NULL;
    }
    return Py_BuildValue("(NiN)", memory, (int)buffer->dtype, shape);
}

static PyObject *views(void **buffers, int32_t *types, int64_t size, int buffer_type,
                       int flags) {
    PyObject *out = PyTuple_New((Py_ssize_t)size);
    if (out == NULL) return NULL;
    for (int64_t i = 0; i < size; i++) {
        if (types[i] != buffer_type) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "interop's XLA FFI handler takes only buffers");
            return NULL;
        }
        PyObject *v = view((const IX_Buffer *)buffers[i], flags);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    return out;
}

/* The message of the pending Python exception, as "Type: message" (the exception is kept by the
 * Python side, which records it before returning). */
static IX_Error *fail_with_exception(const IX_Api *api) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    IX_Error *error = NULL;
    PyObject *text = NULL;
    if (value != NULL) {
        text = PyUnicode_FromFormat("%s: %S", Py_TYPE(value)->tp_name, value);
    }
    const char *message = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
    if (message == NULL) {
        PyErr_Clear();
        message = "interop: the bridged function failed (its message could not be read)";
    }
    error = fail(api, message); /* XLA copies the message */
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return error;
}

static IX_Error *metadata(const IX_Api *api, IX_MetadataExtension *extension) {
    if (extension->extension_base.struct_size < IX_END_OF(IX_MetadataExtension, metadata) ||
        extension->metadata->struct_size < IX_END_OF(IX_Metadata, traits)) {
        return fail(api, "interop's XLA FFI handler: metadata struct too small");
    }
    extension->metadata->api_version.struct_size = IX_END_OF(IX_ApiVersion, minor_version);
    extension->metadata->api_version.extension_start = NULL;
    extension->metadata->api_version.major_version = IX_API_MAJOR;
    extension->metadata->api_version.minor_version = IX_API_MINOR;
    extension->metadata->traits = 0;
    return NULL;
}

static IX_Error *execute(IX_CallFrame *frame) {
    const IX_Api *api = frame->api;
    if (frame->extension_start != NULL && frame->extension_start->type == IX_EXTENSION_METADATA) {
        return metadata(api, (IX_MetadataExtension *)frame->extension_start);
    }
    if (frame->stage != IX_STAGE_EXECUTE) return NULL; /* nothing to instantiate or prepare */

    int64_t key = -1;
    for (int64_t i = 0; i < frame->attrs.size; i++) {
        const IX_ByteSpan *name = frame->attrs.names[i];
        const IX_Scalar *scalar = (const IX_Scalar *)frame->attrs.attrs[i];
        if (frame->attrs.types[i] == IX_ATTR_SCALAR && name->len == 3 &&
            memcmp(name->ptr, "key", 3) == 0 && scalar->dtype == IX_DTYPE_S64) {
            key = *(const int64_t *)scalar->value;
        }
    }
    if (key < 0) return fail(api, "interop's XLA FFI handler: no int64 attribute `key`");

    PyGILState_STATE gil = PyGILState_Ensure();
    IX_Error *error = NULL;
    PyObject *ins = NULL, *outs = NULL, *result = NULL;
    if (callback == NULL) {
        error = fail(api, "interop's XLA FFI handler: no Python callback registered");
        goto done;
    }
    ins = views(frame->args.args, frame->args.types, frame->args.size, IX_ARG_BUFFER, PyBUF_READ);
    if (ins == NULL) goto failed;
    outs = views(frame->rets.rets, frame->rets.types, frame->rets.size, IX_RET_BUFFER, PyBUF_WRITE);
    if (outs == NULL) goto failed;
    result = PyObject_CallFunction(callback, "LOO", (long long)key, ins, outs);
    if (result == NULL) goto failed;
    goto done;
failed:
    error = fail_with_exception(api);
done:
    Py_XDECREF(result);
    Py_XDECREF(outs);
    Py_XDECREF(ins);
    PyGILState_Release(gil);
    return error;
}

/* -- the module -------------------------------------------------------------------------- */

static PyObject *set_callback(PyObject *self, PyObject *fn) {
    (void)self;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "set_callback takes a callable");
        return NULL;
    }
    Py_INCREF(fn);
    Py_XSETREF(callback, fn);
    Py_RETURN_NONE;
}

static PyObject *handler(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    /* jax.ffi.register_ffi_target takes a PyCapsule holding the handler's address */
    return PyCapsule_New((void *)(uintptr_t)&execute, NULL, NULL);
}

static PyMethodDef methods[] = {
    {"set_callback", set_callback, METH_O,
     "Set the Python function the handler calls as fn(key, ins, outs)."},
    {"handler", handler, METH_NOARGS, "The FFI handler, as a PyCapsule for jax.ffi."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "interop_jax._xla_ffi",
    "An XLA FFI handler calling back into Python (see xla_ffi.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__xla_ffi(void) { return PyModule_Create(&module); }
