/*
 * klineage — learn when a GPU-kernel optimization is sound and pays, from expert kernels.
 *
 * This is the public API; the command-line tool uses nothing else. Conventions, everywhere:
 *  - functions are kl_<object>_<verb>; handles are opaque; small values pass by value;
 *  - a function that can fail returns kl_status and, when given a kl_error*, fills it
 *    with a message naming the file, line and what was expected;
 *  - every returned pointer states who owns it and which function frees it;
 *    free functions accept NULL;
 *  - the library never prints, exits or aborts.
 */
#ifndef KLINEAGE_H
#define KLINEAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KL_VERSION_STRING "0.1.0"

/* Status codes. Append-only: a value, once published, never changes meaning. */
typedef enum kl_status {
    KL_OK = 0,
    KL_ERR_NOMEM = 1,       /* an allocation failed */
    KL_ERR_IO = 2,          /* a file could not be read or written */
    KL_ERR_NOT_FOUND = 3,   /* a file, key or record does not exist */
    KL_ERR_INVALID = 4,     /* an argument or an input is malformed */
    KL_ERR_PARSE = 5,       /* source or JSON did not parse */
    KL_ERR_TOO_LARGE = 6,   /* an input or an output is past its limit */
    KL_ERR_CHILD = 7,       /* a child process failed to start or died */
    KL_ERR_TIMEOUT = 8,     /* a deadline passed */
    KL_ERR_COMPILE = 9,     /* nvcc rejected the source */
    KL_ERR_NO_GPU = 10,     /* the work needs a GPU and none is present */
    KL_ERR_STORE = 11,      /* the SQLite store failed */
    KL_ERR_NOT_APPLICABLE = 12, /* a transform does not apply at a site */
    KL_ERR_UNMEASURED = 13, /* replay found no recorded verdict */
    KL_ERR_NETWORK = 14,    /* an endpoint could not be reached or answered badly */
    KL_ERR_INTERRUPTED = 15,/* the work was interrupted (a signal) */
    KL_ERR_UNSUPPORTED = 16 /* the feature is not available in this build or machine */
} kl_status;

/* Detail of a failure, owned by the caller (usually on the stack). */
#define KL_ERROR_MAX 1024
typedef struct kl_error {
    kl_status status;
    char message[KL_ERROR_MAX];
} kl_error;

/* A static, human-readable name of a status ("out of memory", …). Never NULL. */
const char *kl_strerror(kl_status status);

/* The library's version string, static. */
const char *kl_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KLINEAGE_H */
