/*
 * Tasks: task.json + reference.c + kernel files (docs/task-format.md).
 * Plain data with its checks; knows nothing of the gate or the searches.
 */
#ifndef KLINEAGE_TASK_H
#define KLINEAGE_TASK_H

#include <stdbool.h>
#include <stdint.h>
#include "klineage/klineage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kl_dtype {
    KL_DTYPE_NONE = 0, /* a scalar size argument ("int") */
    KL_DTYPE_F32, KL_DTYPE_F16, KL_DTYPE_BF16, KL_DTYPE_F64, KL_DTYPE_I32, KL_DTYPE_U8
} kl_dtype;

typedef enum kl_role { KL_ROLE_IN, KL_ROLE_OUT, KL_ROLE_INOUT } kl_role;
typedef enum kl_dist { KL_DIST_NONE, KL_DIST_NORMAL, KL_DIST_UNIFORM, KL_DIST_INT_UNIFORM } kl_dist;

/* An input distribution; bounds are expressions over the sizes (kl_task_eval). */
typedef struct kl_init {
    kl_dist dist;
    double mean, std;          /* normal */
    const char *lo, *hi;       /* uniform / int_uniform: expressions or numbers as text */
} kl_init;

typedef struct kl_arg {
    const char *name;
    kl_dtype dtype;            /* KL_DTYPE_NONE for an int scalar */
    const char *shape;         /* tensor: element count expression */
    const char *value;         /* scalar: expression */
    kl_role role;
    kl_init init;
} kl_arg;

/* One shape: a value for every size, in the order of kl_task.sizes. */
typedef struct kl_shape {
    const char *label;         /* "bench", "check[2]" or a given name */
    int64_t *values;
} kl_shape;

typedef struct kl_task {
    const char *dir;           /* the task's folder */
    const char *name, *summary;
    const char **sizes;        /* size names */
    unsigned nsizes;
    kl_arg *args;
    unsigned nargs;
    kl_shape bench;
    kl_shape *checks;
    unsigned nchecks;
    double rel_l2, max_abs;    /* tolerance; max_abs < 0 when not given */
    bool exact;
    const char *cost_flops, *cost_bytes; /* expressions, may be NULL */
    const char *naive, *expert;          /* kernel file names relative to dir (may be NULL) */
    const char *reference;               /* "reference.c" unless given */
    double reference_max_flops;          /* extension: above this many flops (cost.flops) at a
                                            shape, the CPU reference is not run there and a
                                            kernel validated at the smaller shapes stands in;
                                            0 when not given (always run the reference) */
} kl_task;

/* Load and validate dir/task.json. On failure err names the file, the key and the reason;
 * every fault found is listed in err (one per line). *out is owned by the caller (kl_task_free). */
kl_status kl_task_load(const char *dir, kl_task **out, kl_error *err);
void kl_task_free(kl_task *task);

/* ---- validation in full ------------------------------------------------------------------
 * kl_task_load packs the faults into err (as many lines as fit); `klineage task check` wants every
 * fault as data. A fault names the file (as given: "tasks/x/task.json", "tasks/x/naive.cu"),
 * the place in it when known, the key (a JSON path such as "args[2].init.lo", or "" for the
 * file as a whole) and the reason. */
typedef struct kl_task_fault {
    char *file;
    unsigned line, column;     /* 1-based; 0 when not known (JSON values carry no position) */
    char *key;
    char *reason;
} kl_task_fault;

/* A growable list of faults, owned by whoever declared it (kl_task_faults_release). */
typedef struct kl_task_faults {
    kl_task_fault *items;
    unsigned count, cap;
} kl_task_faults;
#define KL_TASK_FAULTS_INIT {NULL, 0, 0}

/* Limits of task.json (docs/task-format.md, "Limits"): past them the key is one fault and is
 * not read further. */
#define KL_TASK_MAX_SIZES 64u
#define KL_TASK_MAX_ARGS 256u
#define KL_TASK_MAX_CHECKS 256u
void kl_task_faults_release(kl_task_faults *faults); /* frees the items; accepts NULL */
/* "FILE[:LINE[:COL]]: KEY: REASON" (the key part left out when empty), new string (free()). */
char *kl_task_fault_text(const kl_task_fault *fault);

/* Load and validate dir/task.json, collecting every fault into *faults (appended).
 * KL_OK with *out set (kl_task_free) when there is none; KL_ERR_INVALID when there are
 * (then *out is NULL and err holds the first fault and the count); other statuses for
 * failures that are not the task's fault (out of memory). */
kl_status kl_task_validate(const char *dir, kl_task **out, kl_task_faults *faults, kl_error *err);

/* The shape with this label ("bench", "check[2]"), or NULL. Owned by task. */
const kl_shape *kl_task_shape(const kl_task *task, const char *label);

/* Evaluate an integer expression over the sizes of `shape` (C semantics, int64, overflow
 * and division by zero are errors). */
kl_status kl_task_eval(const kl_task *task, const kl_shape *shape, const char *expr, int64_t *out, kl_error *err);

/* A path inside the task folder, new string (free()). */
char *kl_task_path(const kl_task *task, const char *file);

/* ---- inputs ----------------------------------------------------------------------------
 * Deterministic random inputs: the same (task, shape, arg, seed) gives the same values on
 * every machine. A tensor is filled in its own dtype (f16/bf16 as their 16-bit patterns,
 * rounded to nearest even). */

/* Element count of tensor argument `arg` at `shape`. */
kl_status kl_task_arg_count(const kl_task *task, const kl_shape *shape, unsigned arg, int64_t *count, kl_error *err);
/* Fill buf (count elements of the arg's dtype) from the arg's distribution. Output args
 * (role out) are not filled: callers poison them. */
kl_status kl_task_fill(const kl_task *task, const kl_shape *shape, unsigned arg, uint64_t seed, void *buf,
                       int64_t count, kl_error *err);
/* The same values for elements [first, first+count) only, into buf (count elements): chunks
 * filled separately (or on several threads) equal one whole fill, bit for bit. */
kl_status kl_task_fill_range(const kl_task *task, const kl_shape *shape, unsigned arg, uint64_t seed, void *buf,
                             int64_t first, int64_t count, kl_error *err);
/* Convert count elements of dtype t at src into doubles at dst (f16/bf16 decoded exactly). */
void kl_dtype_to_double(kl_dtype t, const void *src, double *dst, int64_t count);
/* The other way: doubles rounded to dtype t (f32/f16/bf16 to nearest even; i32/u8 rounded to
 * nearest and saturated, NaN to 0). */
void kl_dtype_from_double(kl_dtype t, const double *src, void *dst, int64_t count);
/* The value of scalar argument `arg` ("int") at shape: its expression, checked to fit an int. */
kl_status kl_task_arg_value(const kl_task *task, const kl_shape *shape, unsigned arg, int *value, kl_error *err);

/* ---- the reference ------------------------------------------------------------------------
 * reference.c compiled with the host C compiler into a shared object (cached by content
 * hash) and called through a generated typed shim. */
typedef struct kl_reference kl_reference;
/* Build (or find in cache_dir; NULL: the default cache folder, $KLINEAGE_CACHE or
 * ~/.cache/klineage) and load the reference: `$CC` (default `cc`) -O2 -fPIC -shared, with
 * reference.c and the generated shim as one translation unit, so a reference() whose
 * parameters differ from the declared args fails to compile. KL_ERR_COMPILE carries the
 * first "file:line:col: error:" line, then the compiler log. *out: kl_reference_free. */
kl_status kl_reference_load(const kl_task *task, const char *cache_dir, kl_reference **out, kl_error *err);
void kl_reference_free(kl_reference *ref);
/* Run it at `shape`, in a forked child of this process, at most the reference's time limit
 * (KL_REFERENCE_TIMEOUT_S unless kl_reference_set_timeout changed it): a reference that
 * crashes (KL_ERR_CHILD, naming the signal), runs past the limit (KL_ERR_TIMEOUT) or ends its
 * process with exit() instead of returning (KL_ERR_CHILD) is an error naming the reference and
 * the shape; what it prints goes to stderr. args[i] points to the host data of argument i in
 * the task's dtype (as filled by kl_task_fill; ignored for scalars and outputs). Floating
 * outputs start as NaN, integer outputs as 0xA5 bytes, so unwritten elements show. On
 * return outs[i] (for out/inout args) is a new array of doubles, count elements, owned by
 * the caller (free()); other entries NULL (all NULL on failure). */
kl_status kl_reference_run(kl_reference *ref, const kl_task *task, const kl_shape *shape, void *const *args,
                           double **outs, kl_error *err);
#define KL_REFERENCE_TIMEOUT_S 600.0
/* One run's time limit in seconds (<= 0: none). */
void kl_reference_set_timeout(kl_reference *ref, double seconds);

/* Check that the reference is not weak: run it on two seeds at the check shapes, smallest
 * first (those under a size budget), and fault each output that never changes when the inputs
 * change, is constant across its elements on every shape tried, or is left NaN (unwritten).
 * Faults are appended to *faults on the reference file; KL_OK means the probe ran (look at
 * faults->count), another status that it could not run. Each run is limited to 120 s (or the
 * reference's own limit when lower). */
kl_status kl_reference_probe(kl_reference *ref, const kl_task *task, uint64_t seed_a, uint64_t seed_b,
                             kl_task_faults *faults, kl_error *err);

/* Size in bytes of one element of dtype; 0 for NONE. */
size_t kl_dtype_size(kl_dtype t);
const char *kl_dtype_name(kl_dtype t);       /* "f32" … */
const char *kl_dtype_ctype(kl_dtype t);      /* "float", "__nv_bfloat16", "int32_t", … */

#ifdef __cplusplus
}
#endif
#endif
