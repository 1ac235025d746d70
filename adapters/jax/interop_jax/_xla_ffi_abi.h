/* The part of XLA's FFI C API (xla/ffi/api/c_api.h) that interop's handler reads or writes,
 * mirrored under our own names so that the build needs no jaxlib headers. That ABI is versioned
 * and only grows at the end of each struct; tests/test_grad_xla_ffi.py compiles this header next
 * to jaxlib's and checks sizes, offsets and values where both gcc and jaxlib are present.
 */
#ifndef INTEROP_JAX_XLA_FFI_ABI_H
#define INTEROP_JAX_XLA_FFI_ABI_H

#include <stddef.h>
#include <stdint.h>

#define IX_API_MAJOR 0
#define IX_API_MINOR 1 /* the oldest minor whose call frames this handler understands */

typedef enum { IX_EXTENSION_METADATA = 1 } IX_ExtensionType;

typedef struct IX_ExtensionBase {
    size_t struct_size;
    IX_ExtensionType type;
    struct IX_ExtensionBase *next;
} IX_ExtensionBase;

typedef struct IX_ApiVersion {
    size_t struct_size;
    IX_ExtensionBase *extension_start;
    int major_version;
    int minor_version;
} IX_ApiVersion;

typedef struct IX_Error IX_Error; /* opaque, made by the API */

typedef enum { IX_ERROR_CODE_INTERNAL = 13 } IX_ErrorCode;

typedef struct IX_ErrorCreateArgs {
    size_t struct_size;
    IX_ExtensionBase *extension_start;
    const char *message;
    IX_ErrorCode errc;
} IX_ErrorCreateArgs;

typedef IX_Error *IX_ErrorCreate(IX_ErrorCreateArgs *args);

typedef enum { IX_DTYPE_S64 = 5 } IX_DataType; /* the buffers' codes go to Python as ints */

typedef struct IX_Buffer {
    size_t struct_size;
    IX_ExtensionBase *extension_start;
    int32_t dtype; /* an XLA_FFI_DataType (a C enum: int-sized) */
    void *data;
    int64_t rank;
    int64_t *dims;
} IX_Buffer;

typedef enum { IX_ARG_BUFFER = 1 } IX_ArgType;
typedef enum { IX_RET_BUFFER = 1 } IX_RetType;
typedef enum { IX_ATTR_SCALAR = 3 } IX_AttrType;

typedef struct IX_ByteSpan {
    const char *ptr;
    size_t len;
} IX_ByteSpan;

typedef struct IX_Scalar {
    int32_t dtype;
    void *value;
} IX_Scalar;

typedef enum { IX_STAGE_EXECUTE = 3 } IX_ExecutionStage;

typedef struct IX_Args {
    size_t struct_size;
    IX_ExtensionBase *extension_start;
    int64_t size;
    int32_t *types;
    void **args;
} IX_Args;

typedef struct IX_Rets {
    size_t struct_size;
    IX_ExtensionBase *extension_start;
    int64_t size;
    int32_t *types;
    void **rets;
} IX_Rets;

typedef struct IX_Attrs {
    size_t struct_size;
    IX_ExtensionBase *extension_start;
    int64_t size;
    int32_t *types;
    IX_ByteSpan **names;
    void **attrs;
} IX_Attrs;

/* The head of XLA_FFI_Api: only the error constructor is used. */
typedef struct IX_Api {
    size_t struct_size;
    IX_ExtensionBase *extension_start;
    IX_ApiVersion api_version;
    const void *internal_api;
    IX_ErrorCreate *error_create;
} IX_Api;

typedef struct IX_CallFrame {
    size_t struct_size;
    IX_ExtensionBase *extension_start;
    const IX_Api *api;
    void *ctx;
    int32_t stage; /* an XLA_FFI_ExecutionStage */
    IX_Args args;
    IX_Rets rets;
    IX_Attrs attrs;
} IX_CallFrame;

typedef uint32_t IX_HandlerTraits;

typedef struct IX_TypeId {
    int64_t type_id;
} IX_TypeId;

typedef struct IX_Metadata {
    size_t struct_size;
    IX_ApiVersion api_version;
    IX_HandlerTraits traits;
    IX_TypeId state_type_id;
} IX_Metadata;

typedef struct IX_MetadataExtension {
    IX_ExtensionBase extension_base;
    IX_Metadata *metadata;
} IX_MetadataExtension;

#define IX_END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

#endif
