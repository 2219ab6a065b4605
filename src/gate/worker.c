/*
 * The worker: one JSON job in, one JSON result out (docs/gate-worker.md). Job "gate" runs
 * a candidate kernel object through the stages correct, determinism, integrity, stream
 * and profile; job "gpu-info" describes the device and measures its ceilings. CUDA is
 * reached only through the device runtime (runtime.h), loaded with dlopen.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "gate/gate_int.h"
#include "gate/measure.h"
#include "gate/sandbox.h"
#include "gate/worker.h"
#include "klineage/task.h"

/* ---- state ------------------------------------------------------------------------------- */

enum { BUILTIN_NONE = 0, BUILTIN_SGEMM = 1, BUILTIN_BF16GEMM = 2 };

typedef struct launcher {
    const char *role;          /* "candidate", "baseline" */
    bool present;
    kl_shim_object obj;        /* a shim object, or */
    int builtin;               /* a vendor baseline (BUILTIN_*) */
    const char *builtin_name;
    unsigned ga, gb, gc, gm, gn, gk; /* the builtin's arguments: indexes into the task's args */
} launcher;

typedef struct dbuf {
    void *base;                /* cudaMalloc'd: guard | data | guard */
    void *ptr;                 /* base + shift: what the kernel gets */
    size_t bytes, shift, alloc;
} dbuf;

/* One shape's arguments, on host and device. */
typedef struct argset {
    const kl_shape *shape;
    size_t shift;              /* bytes of guard before each tensor (a multiple of 256) */
    int64_t *counts;
    size_t *bytes;
    void **host;               /* inputs as filled (in, inout; the input cache's, not owned); NULL for out */
    void **got;                /* outputs as read back (out, inout) */
    void **scratch;            /* inputs as read back for the integrity check */
    dbuf *dev;
    int *scalars;
    void **args;               /* what kl_shim_launch receives */
    uint64_t seed;
    bool filled;
    struct input_entry *entry; /* where the inputs came from (argset_fill) */
} argset;

/* The inputs of one (shape, seed), filled once per job on the pool, and the reference's
 * outputs for them (computed once, on the pool, one reference at a time). Guarded by the
 * worker's cache_mu until `filled` / `ref_done`; read-only afterwards. */
typedef struct input_entry {
    struct worker *w;
    const kl_shape *shape;
    uint64_t seed;
    void **inputs;             /* per argument: host data (in, inout), NULL otherwise */
    int64_t *counts;
    unsigned fills_left;       /* tensors still being filled */
    bool filled, want_ref, ref_queued, ref_done;
    kl_status fill_st, ref_st;
    kl_error fill_err, ref_err;
    double **ref;              /* the reference's outputs (out, inout), once ref_done */
    /* on the device (main thread only): a pristine copy of each input, uploaded once, that
     * every trial's buffers are restored from, and its digest for the integrity check */
    void **dev;
    uint64_t *digest;
    bool on_device;
    struct input_entry *next;
} input_entry;

/* A released buffer kept for the next request of the same size (device or pinned host
 * memory: allocating and freeing either costs more than the work between). */
typedef struct cached_buf {
    void *ptr;
    size_t bytes;
    bool device, pinned, in_use;
    struct cached_buf *next;
} cached_buf;

/* Where the worker's time goes (seconds; the result's "timings"). */
typedef struct worker_times {
    double start;
    double parse, inputs_start, runtime_load, cuda_init, device_info, cupti_init, stream_create, cublas_init,
        baseline_load, snapshot, candidate_load, hygiene;
    double correct, determinism, stream, profile, finish;
    /* inside the stages */
    double alloc, release, upload, launch, readback, integrity, compare;
    double wait_inputs, wait_reference; /* the main thread waiting on the pool */
    double device_inputs;      /* uploading the pristine input copies and their digests */
    unsigned buffers_reused, buffers_allocated;
    /* the profile stage */
    double profile_setup, profile_warmup, profile_timed, profile_rse;
    unsigned profile_reps, profile_batches, profile_retries;
    const char *profile_stopped;
    /* on the pool (summed over its threads) */
    double reference_load, reference_cpu;
    unsigned fills, references;
} worker_times;

typedef struct shape_req {
    const kl_shape *shape;
    bool reference;            /* compared with the CPU reference (else the baseline stands in) */
    unsigned seeds;            /* how many of the job's seeds the correct stage runs here (0: all) */
} shape_req;

typedef struct worker {
    json_t *job, *result;
    kl_rt_api rt;
    bool rt_ready;
    kl_task *task;
    kl_reference *ref;
    char *cache_dir;
    launcher cand, base;
    kl_rt_stream stream;
    shape_req *shapes;
    unsigned nshapes;
    uint64_t *seeds;
    unsigned nseeds;
    kl_tolerance tol;
    int timer;
    const char *stage;         /* the stage running, for errors */

    /* host work on the pool: input fills and references (input_entry) */
    kl_pool *pool;
    pthread_mutex_t cache_mu;  /* guards the entries' progress fields and times.reference_* */
    pthread_cond_t cache_cv;   /* an entry was filled or its reference computed */
    pthread_mutex_t ref_mu;    /* one reference at a time (the task format does not promise a reentrant one) */
    input_entry *entries;
    bool ref_load_tried;
    kl_status ref_load_st;
    kl_error ref_load_err;
    bool task_prepared;        /* the task, shapes and seeds were read before CUDA started */
    bool cancel;               /* the job is over: queued references are skipped (cache_mu) */
    worker_times tm;

    cached_buf *buffers;       /* device and host buffers for reuse (main thread only) */

    bool tight;                /* sanitizer runs: each tensor ends where its allocation ends */
    bool poison_smem;          /* fill the SMs' shared memory before each candidate launch */
    int smem_byte;             /* the byte for the next candidate launch (-1: leave it as it is) */
    unsigned smem_poisoned;    /* candidate launches preceded by a poison */
    bool smem_poison_failed;
    double deadline;           /* kl_now() past which waiting on the pool is the harness's failure; 0: none */
    bool abandon;              /* the pool is left running at the end (a reference past the deadline) */

    kl_sandbox sandbox;        /* in force once applied (ruleset kept for the pool's threads) */
    bool sandboxed;

    bool integrity_on;
    unsigned integrity_launches;
    bool integrity_ok;
    kl_strbuf integrity_detail;

    bool hygiene_ok;
    kl_strbuf hygiene_detail;
    kl_thread_set threads0;
    kl_symbol_snapshot syms0;

    int exit_code;
    json_t *error;             /* {"stage","detail","cuda","sticky"} once failed */
} worker;

/* ---- errors and JSON helpers ---------------------------------------------------------------- */

static json_t *jreal(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static int fail(worker *w, int exit_code, const char *cuda, bool sticky, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(worker *w, int exit_code, const char *cuda, bool sticky, const char *fmt, ...)
{
    if (w->error) return -1; /* the first failure is the one reported */
    char buf[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    w->exit_code = exit_code;
    w->error = json_pack("{s:s, s:s}", "stage", w->stage ? w->stage : "init", "detail", buf);
    if (cuda && *cuda) json_object_set_new(w->error, "cuda", json_string(cuda));
    if (exit_code == KL_WORKER_EXIT_CUDA) json_object_set_new(w->error, "sticky", json_boolean(sticky));
    kl_log(KL_LOG_ERROR, "%s: %s", w->stage ? w->stage : "init", buf);
    return -1;
}

/* A runtime call's result: 0, or the job fails with the runtime's message. */
static int rtc(worker *w, int rc, const char *what)
{
    if (rc == KL_RT_OK) return 0;
    if (rc == KL_RT_ERR_NO_DEVICE)
        return fail(w, KL_WORKER_EXIT_NO_GPU, w->rt.error_name(), false, "no CUDA device: %s", w->rt.error());
    if (rc == KL_RT_ERR_NOMEM || rc == KL_RT_ERR_INVALID || rc == KL_RT_ERR_UNAVAILABLE)
        return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s: %s", what, w->rt.error());
    return fail(w, KL_WORKER_EXIT_CUDA, w->rt.error_name(), rc == KL_RT_ERR_STICKY, "%s: %s", what, w->rt.error());
}

static int kfail(worker *w, int exit_code, const kl_error *err)
{
    return fail(w, exit_code, NULL, false, "%s", err->message);
}

/* ---- job parsing ----------------------------------------------------------------------------- */

static bool key_in(const char *key, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (!strcmp(key, *allowed)) return true;
    return false;
}

/* Every key of obj must be allowed: a typo between the two sides fails loudly. */
static int check_keys(worker *w, json_t *obj, const char *where, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        (void)v;
        if (!key_in(key, allowed))
            return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: %s: unknown key \"%s\"", where, key);
    }
    return 0;
}

static int get_string(worker *w, json_t *obj, const char *key, bool required, const char **out)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) {
        if (required) return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: key \"%s\" is required (a string)", key);
        return 0;
    }
    if (!json_is_string(v)) return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"%s\" must be a string", key);
    *out = json_string_value(v);
    return 0;
}

static int get_number(worker *w, json_t *obj, const char *where, const char *key, double lo, double hi, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return 0; /* keep the default */
    if (!json_is_number(v))
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: %s\"%s\" must be a number", where, key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: %s\"%s\" is %g, expected %g to %g", where, key, d, lo, hi);
    *out = d;
    return 0;
}

static int get_bool(worker *w, json_t *obj, const char *where, const char *key, bool *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: %s\"%s\" must be true or false", where, key);
    *out = json_is_true(v);
    return 0;
}

/* A reference predicted to take longer than this (seconds) at a shape is not run there: the
 * baseline stands in (the reference's speed is measured on this host at a small shape). */
#define REFERENCE_BUDGET_S KL_REFERENCE_BUDGET_S
/* Host time inside the candidate's launch beyond the device work it ran that fails the profile
 * (ms), unless the device work takes longer still: work done on the host is not the task's. */
#define HOST_SLACK_MS 1.0
/* A check shape is timed for the reference's speed when its cost.flops is at most this. */
#define REFERENCE_PROBE_FLOPS 5e7
/* … and at least this: a smaller run times the call, not the reference. */
#define REFERENCE_PROBE_MIN_FLOPS 1e5

typedef struct profile_opts {
    bool on;
    const char *shape;
    double min_reps, max_reps, max_seconds, warmup, settle_rel;
    bool flush_l2;
} profile_opts;

typedef struct gate_opts {
    bool correct, determinism, integrity, stream;
    profile_opts profile;
    double reference_max_flops; /* < 0: no limit */
    double copy_gbs, fma_tflops, tensor_tflops;
    double slack_bytes, slack_flops;
    bool want_cupti;
    double stream_margin_us;
    bool tight, poison_smem;
    double deadline_s;          /* 0: none */
    double reference_budget_s;  /* a reference predicted slower than this at a shape: the baseline there; 0: no limit */
    double host_slack_ms;       /* host time in the candidate's launch beyond its device work that fails the profile */
} gate_opts;

typedef struct gate_paths {
    const char *task_dir, *cand_path, *base_path, *builtin;
    json_t *bmap;
    json_t *sandbox;            /* {"scratch", "read", "write", "require"}, or NULL: none */
} gate_paths;

static int parse_stages(worker *w, json_t *stages, gate_opts *o)
{
    static const char *const keys[] = {"correct", "determinism", "integrity", "stream", "profile", NULL};
    if (!json_is_object(stages)) return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"stages\" must be an object");
    if (check_keys(w, stages, "stages", keys)) return -1;
    if (get_bool(w, stages, "stages.", "correct", &o->correct) || get_bool(w, stages, "stages.", "determinism", &o->determinism) ||
        get_bool(w, stages, "stages.", "integrity", &o->integrity) || get_bool(w, stages, "stages.", "stream", &o->stream))
        return -1;
    json_t *p = json_object_get(stages, "profile");
    if (!p || json_is_false(p) || json_is_null(p)) {
        o->profile.on = false;
        return 0;
    }
    if (json_is_true(p)) {
        o->profile.on = true;
        return 0;
    }
    if (!json_is_object(p))
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"stages.profile\" must be an object, true or false");
    static const char *const pkeys[] = {"shape", "min_reps", "max_reps", "max_seconds", "warmup", "flush_l2",
                                        "settle_rel", NULL};
    if (check_keys(w, p, "stages.profile", pkeys)) return -1;
    o->profile.on = true;
    if (get_string(w, p, "shape", false, &o->profile.shape)) return -1;
    if (!o->profile.shape) o->profile.shape = "bench";
    if (get_number(w, p, "stages.profile.", "min_reps", 1, 100000, &o->profile.min_reps) ||
        get_number(w, p, "stages.profile.", "max_reps", 1, 100000, &o->profile.max_reps) ||
        get_number(w, p, "stages.profile.", "max_seconds", 0.01, 3600, &o->profile.max_seconds) ||
        get_number(w, p, "stages.profile.", "warmup", 0, 1000, &o->profile.warmup) ||
        get_number(w, p, "stages.profile.", "settle_rel", 1e-6, 1, &o->profile.settle_rel) ||
        get_bool(w, p, "stages.profile.", "flush_l2", &o->profile.flush_l2))
        return -1;
    if (o->profile.max_reps < o->profile.min_reps) o->profile.max_reps = o->profile.min_reps;
    return 0;
}

static int parse_shapes(worker *w, json_t *arr)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"shapes\" must be a non-empty array of shape labels");
    w->nshapes = (unsigned)json_array_size(arr);
    w->shapes = calloc(w->nshapes, sizeof *w->shapes);
    if (!w->shapes) return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    for (unsigned i = 0; i < w->nshapes; i++) {
        json_t *s = json_array_get(arr, i);
        const char *label = NULL;
        bool reference = true;
        double seeds = 0;
        if (json_is_string(s)) {
            label = json_string_value(s);
        } else if (json_is_object(s)) {
            static const char *const keys[] = {"label", "reference", "seeds", NULL};
            if (check_keys(w, s, "shapes[]", keys)) return -1;
            json_t *l = json_object_get(s, "label");
            if (!json_is_string(l))
                return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: shapes[%u]: \"label\" must be a string", i);
            label = json_string_value(l);
            if (get_bool(w, s, "shapes[].", "reference", &reference)) return -1;
            if (get_number(w, s, "shapes[].", "seeds", 1, 64, &seeds)) return -1;
        } else {
            return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: shapes[%u] must be a label or {\"label\", \"reference\"}", i);
        }
        w->shapes[i].shape = kl_task_shape(w->task, label);
        if (!w->shapes[i].shape)
            return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: shapes[%u]: task %s has no shape \"%s\"", i,
                        w->task->name ? w->task->name : "?", label);
        w->shapes[i].reference = reference;
        w->shapes[i].seeds = (unsigned)seeds;
    }
    return 0;
}

static int parse_seeds(worker *w, json_t *arr)
{
    if (!arr) {
        w->nseeds = 2;
        w->seeds = calloc(2, sizeof *w->seeds);
        if (!w->seeds) return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
        w->seeds[0] = 1234;
        w->seeds[1] = 5678;
        return 0;
    }
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"seeds\" must be a non-empty array of integers");
    w->nseeds = (unsigned)json_array_size(arr);
    w->seeds = calloc(w->nseeds, sizeof *w->seeds);
    if (!w->seeds) return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    for (unsigned i = 0; i < w->nseeds; i++) {
        json_t *s = json_array_get(arr, i);
        if (!json_is_integer(s) || json_integer_value(s) < 0)
            return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: seeds[%u] must be a non-negative integer", i);
        w->seeds[i] = (uint64_t)json_integer_value(s);
    }
    return 0;
}

/* ---- launchers -------------------------------------------------------------------------------- */

static int find_arg(const kl_task *t, const char *name, bool scalar, unsigned nth)
{
    /* by name (case-insensitive), else the nth argument of the kind */
    unsigned seen = 0;
    for (unsigned i = 0; i < t->nargs; i++)
        if (t->args[i].name && !strcasecmp(t->args[i].name, name) && ((t->args[i].dtype == KL_DTYPE_NONE) == scalar))
            return (int)i;
    for (unsigned i = 0; i < t->nargs; i++) {
        if ((t->args[i].dtype == KL_DTYPE_NONE) != scalar) continue;
        if (seen++ == nth) return (int)i;
    }
    return -1;
}

/* A vendor baseline takes the task's GEMM arguments: A, B (inputs), C (output), M, N, K. */
static int setup_builtin(worker *w, launcher *L, const char *name, json_t *map)
{
    const kl_task *t = w->task;
    if (!strcmp(name, "cublas-sgemm")) L->builtin = BUILTIN_SGEMM;
    else if (!strcmp(name, "cublas-bf16gemm")) L->builtin = BUILTIN_BF16GEMM;
    else
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false,
                    "job: baseline_builtin \"%s\" is not one of cublas-sgemm, cublas-bf16gemm", name);
    L->builtin_name = name;
    const char *names[6] = {"A", "B", "C", "M", "N", "K"};
    int idx[6];
    for (int i = 0; i < 6; i++) {
        const char *want = names[i];
        if (map) {
            json_t *v = json_object_get(map, names[i]);
            if (v && !json_is_string(v))
                return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: baseline_args.%s must be an argument name", names[i]);
            if (v) want = json_string_value(v);
        }
        idx[i] = find_arg(t, want, i >= 3, (unsigned)(i % 3));
        if (idx[i] < 0)
            return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "%s: task %s has no argument for GEMM operand %s", name,
                        t->name ? t->name : "?", names[i]);
    }
    L->ga = (unsigned)idx[0];
    L->gb = (unsigned)idx[1];
    L->gc = (unsigned)idx[2];
    L->gm = (unsigned)idx[3];
    L->gn = (unsigned)idx[4];
    L->gk = (unsigned)idx[5];
    kl_dtype ta = t->args[L->ga].dtype, tb = t->args[L->gb].dtype, tc = t->args[L->gc].dtype;
    kl_dtype want_in = L->builtin == BUILTIN_SGEMM ? KL_DTYPE_F32 : KL_DTYPE_BF16;
    bool c_ok = L->builtin == BUILTIN_SGEMM ? tc == KL_DTYPE_F32 : (tc == KL_DTYPE_F32 || tc == KL_DTYPE_BF16);
    if (ta != want_in || tb != want_in || !c_ok || t->args[L->gc].role == KL_ROLE_IN)
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false,
                    "%s: task %s's operands are %s x %s -> %s; it needs %s inputs and a %s output", name,
                    t->name ? t->name : "?", kl_dtype_name(ta), kl_dtype_name(tb), kl_dtype_name(tc),
                    kl_dtype_name(want_in), L->builtin == BUILTIN_SGEMM ? "f32" : "f32 or bf16");
    int rc = w->rt.cublas_available();
    if (!rc) return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s: %s", name, w->rt.error());
    L->present = true;
    return 0;
}

/* Launch L on the worker's stream with set's arguments; checks the launch error. */
static int launch(worker *w, launcher *L, argset *set)
{
    int rc;
    if (L->builtin) {
        int M = set->scalars[L->gm], N = set->scalars[L->gn], K = set->scalars[L->gk];
        if (L->builtin == BUILTIN_SGEMM)
            rc = w->rt.cublas_sgemm(set->args[L->ga], set->args[L->gb], set->args[L->gc], M, N, K, w->stream);
        else
            rc = w->rt.cublas_bf16gemm(set->args[L->ga], set->args[L->gb], set->args[L->gc],
                                       w->task->args[L->gc].dtype == KL_DTYPE_F32, M, N, K, w->stream);
        return rtc(w, rc, L->builtin_name);
    }
    int shim_rc = L->obj.launch(set->args, w->stream);
    rc = w->rt.check();
    if (rc != KL_RT_OK) {
        char what[128];
        kl_snprintf(what, sizeof what, "the %s's launch()", L->role);
        return rtc(w, rc, what);
    }
    if (shim_rc != 0)
        return fail(w, KL_WORKER_EXIT_CUDA, NULL, false, "the %s's launch() left CUDA error %d", L->role, shim_rc);
    return 0;
}

/* ---- buffers ---------------------------------------------------------------------------------- */

/* Host buffers this large are page-locked (readbacks at the bus's speed); smaller ones are
 * plain malloc: pinning costs more than it saves there. */
#define PINNED_MIN_BYTES ((size_t)1 << 20)

/* A device buffer, or a host buffer (pinned when large), of exactly `bytes`: a released one
 * of that size when there is one, else a new one. NULL with w->error set on failure. */
static void *buf_get(worker *w, bool device, size_t bytes, const char *what)
{
    if (!bytes) bytes = 1;
    for (cached_buf *c = w->buffers; c; c = c->next)
        if (!c->in_use && c->device == device && c->bytes == bytes) {
            c->in_use = true;
            w->tm.buffers_reused++;
            return c->ptr;
        }
    cached_buf *c = calloc(1, sizeof *c);
    if (!c) {
        fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
        return NULL;
    }
    c->bytes = bytes;
    c->device = device;
    if (device) {
        if (rtc(w, w->rt.malloc(&c->ptr, bytes), what)) {
            free(c);
            return NULL;
        }
    } else if (bytes >= PINNED_MIN_BYTES && w->rt.host_alloc(&c->ptr, bytes) == KL_RT_OK) {
        c->pinned = true;
    } else {
        c->ptr = malloc(bytes);
        if (!c->ptr) {
            fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s: out of host memory for %zu bytes", what, bytes);
            free(c);
            return NULL;
        }
    }
    c->in_use = true;
    c->next = w->buffers;
    w->buffers = c;
    w->tm.buffers_allocated++;
    return c->ptr;
}

static void buf_put(worker *w, void *ptr)
{
    if (!ptr) return;
    for (cached_buf *c = w->buffers; c; c = c->next)
        if (c->ptr == ptr) {
            c->in_use = false;
            return;
        }
}

/* At the end of the job. Device memory is left to the context's end when it is lost. */
static void buffers_free(worker *w)
{
    bool dev_ok = w->rt_ready && w->exit_code != KL_WORKER_EXIT_CUDA;
    while (w->buffers) {
        cached_buf *c = w->buffers;
        w->buffers = c->next;
        if (c->device) {
            if (dev_ok) w->rt.free(c->ptr);
        } else if (c->pinned) {
            if (dev_ok) w->rt.host_free(c->ptr);
        } else {
            free(c->ptr);
        }
        free(c);
    }
}

/* ---- argument sets --------------------------------------------------------------------------- */

#define GUARD_BYTES 256
#define GUARD_BYTE 0xA5

static void argset_release(worker *w, argset *s)
{
    unsigned n = w->task ? w->task->nargs : 0;
    double t0 = kl_now();
    for (unsigned i = 0; i < n; i++) {
        if (s->got) buf_put(w, s->got[i]);
        if (s->scratch) free(s->scratch[i]);
        if (s->dev) buf_put(w, s->dev[i].base);
    }
    free(s->counts);
    free(s->bytes);
    free(s->host);
    free(s->got);
    free(s->scratch);
    free(s->dev);
    free(s->scalars);
    free(s->args);
    memset(s, 0, sizeof *s);
    w->tm.release += kl_now() - t0;
}

/* Allocate host and device buffers for `shape`, each tensor `shift` bytes into its
 * allocation with guard zones on both sides. */
static int argset_init(worker *w, argset *s, const kl_shape *shape, size_t shift)
{
    const kl_task *t = w->task;
    unsigned n = t->nargs;
    kl_error err = {0};
    double t0 = kl_now();
    memset(s, 0, sizeof *s);
    s->shape = shape;
    s->shift = shift;
    s->counts = calloc(n, sizeof *s->counts);
    s->bytes = calloc(n, sizeof *s->bytes);
    s->host = calloc(n, sizeof *s->host);
    s->got = calloc(n, sizeof *s->got);
    s->scratch = calloc(n, sizeof *s->scratch);
    s->dev = calloc(n, sizeof *s->dev);
    s->scalars = calloc(n, sizeof *s->scalars);
    s->args = calloc(n, sizeof *s->args);
    if (!s->counts || !s->bytes || !s->host || !s->got || !s->scratch || !s->dev || !s->scalars || !s->args)
        return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    for (unsigned i = 0; i < n; i++) {
        const kl_arg *a = &t->args[i];
        if (a->dtype == KL_DTYPE_NONE) {
            if (kl_task_arg_value(t, shape, i, &s->scalars[i], &err) != KL_OK) return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
            s->args[i] = &s->scalars[i];
            continue;
        }
        if (kl_task_arg_count(t, shape, i, &s->counts[i], &err) != KL_OK) return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        size_t es = kl_dtype_size(a->dtype);
        if (s->counts[i] < 0 || (uint64_t)s->counts[i] > (SIZE_MAX / 2) / es)
            return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s at %s: %lld elements do not fit in memory", a->name,
                        shape->label, (long long)s->counts[i]);
        size_t bytes = (size_t)s->counts[i] * es;
        s->bytes[i] = bytes;
        char what[160];
        if (a->role != KL_ROLE_IN) {
            kl_snprintf(what, sizeof what, "%s at %s", a->name, shape->label);
            if (!(s->got[i] = buf_get(w, false, bytes, what))) return -1;
        }
        dbuf *d = &s->dev[i];
        d->bytes = bytes;
        d->shift = shift;
        /* under a sanitizer the tensor's last byte is its allocation's last byte: a read one
         * element past it is outside every allocation, which memcheck reports (inside a guard
         * zone it would be silent) */
        d->alloc = w->tight ? (bytes ? bytes : 1) : shift + ((bytes + 255) & ~(size_t)255) + GUARD_BYTES;
        if (w->tight) d->shift = shift = 0;
        kl_snprintf(what, sizeof what, "allocating %s at %s", a->name, shape->label);
        if (!(d->base = buf_get(w, true, d->alloc, what))) return -1;
        d->ptr = (char *)d->base + shift;
        s->args[i] = d->ptr;
    }
    w->tm.alloc += kl_now() - t0;
    return 0;
}

static int inputs_get(worker *w, const kl_shape *shape, uint64_t seed, input_entry **out);

/* The inputs from the task's distributions (host only): the input cache's buffers for
 * (shape, seed), filled once per job. */
static int argset_fill(worker *w, argset *s, uint64_t seed)
{
    input_entry *e;
    if (inputs_get(w, s->shape, seed, &e)) return -1;
    for (unsigned i = 0; i < w->task->nargs; i++) {
        const kl_arg *a = &w->task->args[i];
        if (a->dtype == KL_DTYPE_NONE || a->role == KL_ROLE_OUT) continue;
        s->host[i] = e->inputs[i];
    }
    s->seed = seed;
    s->filled = true;
    s->entry = e;
    return 0;
}

/* The entry's inputs on the device, once: the pristine copies every trial is restored from
 * (a device-to-device copy instead of a host upload) and their digests. */
static int entry_to_device(worker *w, input_entry *e)
{
    if (e->on_device) return 0;
    const kl_task *t = w->task;
    double t0 = kl_now();
    if (!e->dev) e->dev = calloc(t->nargs, sizeof *e->dev);
    if (!e->digest) e->digest = calloc(t->nargs, sizeof *e->digest);
    if (!e->dev || !e->digest) return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    for (unsigned i = 0; i < t->nargs; i++) {
        if (!e->inputs[i] || e->dev[i]) continue;
        size_t bytes = (size_t)e->counts[i] * kl_dtype_size(t->args[i].dtype);
        if (rtc(w, w->rt.malloc(&e->dev[i], bytes), "allocating the device copy of an input")) return -1;
        if (bytes && rtc(w, w->rt.h2d(e->dev[i], e->inputs[i], bytes), "copying an input to the device")) return -1;
        if (rtc(w, w->rt.digest(e->dev[i], bytes, &e->digest[i]), "computing an input's digest")) return -1;
    }
    e->on_device = true;
    w->tm.device_inputs += kl_now() - t0;
    return 0;
}

/* Device buffers: guards, inputs as filled (from their pristine device copies), outputs
 * poisoned with pass's byte. */
static int argset_upload(worker *w, argset *s, int pass)
{
    if (s->entry && entry_to_device(w, s->entry)) return -1;
    double t0 = kl_now();
    for (unsigned i = 0; i < w->task->nargs; i++) {
        const kl_arg *a = &w->task->args[i];
        if (a->dtype == KL_DTYPE_NONE) continue;
        dbuf *d = &s->dev[i];
        if (rtc(w, w->rt.memset(d->base, GUARD_BYTE, d->alloc), "writing guard zones")) return -1;
        if (a->role == KL_ROLE_OUT) {
            if (rtc(w, w->rt.memset(d->ptr, kl_poison_byte(a->dtype, pass), d->bytes), "poisoning an output")) return -1;
        } else if (d->bytes && s->entry && s->entry->dev[i]) {
            if (rtc(w, w->rt.d2d(d->ptr, s->entry->dev[i], d->bytes), "restoring an input on the device")) return -1;
        } else if (d->bytes) {
            if (rtc(w, w->rt.h2d(d->ptr, s->host[i], d->bytes), "copying an input to the device")) return -1;
        }
    }
    w->tm.upload += kl_now() - t0;
    return 0;
}

/* Read the outputs back (after a stream-only synchronize: the readback stream waits for nothing). */
static int argset_read(worker *w, argset *s)
{
    double t0 = kl_now();
    for (unsigned i = 0; i < w->task->nargs; i++) {
        const kl_arg *a = &w->task->args[i];
        if (a->dtype == KL_DTYPE_NONE || a->role == KL_ROLE_IN || !s->bytes[i]) continue;
        if (rtc(w, w->rt.d2h(s->got[i], s->dev[i].ptr, s->bytes[i]), "reading an output back")) return -1;
    }
    w->tm.readback += kl_now() - t0;
    return 0;
}

static void integrity_note(worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void integrity_note(worker *w, const char *fmt, ...)
{
    if (!w->integrity_ok) return; /* the first fault is the one reported */
    w->integrity_ok = false;
    va_list ap;
    va_start(ap, fmt);
    kl_strbuf_vaddf(&w->integrity_detail, fmt, ap);
    va_end(ap);
}

/* Input i of s changed? Its digest on the device against the pristine copy's; only when they
 * differ is the input read back and compared with the host's, element by element, to say
 * where. */
static int input_unchanged(worker *w, argset *s, unsigned i, const char *who)
{
    const kl_arg *a = &w->task->args[i];
    dbuf *d = &s->dev[i];
    if (s->entry && s->entry->on_device && s->entry->dev[i]) {
        uint64_t now;
        if (rtc(w, w->rt.digest(d->ptr, d->bytes, &now), "computing an input's digest")) return -1;
        if (now == s->entry->digest[i]) return 0;
    }
    if (!s->scratch[i] && !(s->scratch[i] = malloc(d->bytes ? d->bytes : 1)))
        return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s at %s: out of host memory for %zu bytes", a->name,
                    s->shape->label, d->bytes);
    if (rtc(w, w->rt.d2h(s->scratch[i], d->ptr, d->bytes), "reading an input back")) return -1;
    int64_t first;
    int64_t ndiff = kl_compare_bits(a->dtype, s->scratch[i], s->host[i], s->counts[i], &first);
    if (ndiff)
        integrity_note(w, "input '%s' changed by the %s at %s (seed %llu): %lld elements, first at %lld", a->name, who,
                       s->shape->label, (unsigned long long)s->seed, (long long)ndiff, (long long)first);
    else if (s->entry && s->entry->on_device)
        integrity_note(w, "input '%s' at %s (seed %llu): the device copy it is restored from was changed by the %s "
                          "(it no longer matches its digest)",
                       a->name, s->shape->label, (unsigned long long)s->seed, who);
    return 0;
}

/* Inputs unchanged, guard zones intact (after a launch, device synchronized). */
static int argset_integrity(worker *w, argset *s, const char *who)
{
    if (!w->integrity_on) return 0;
    double t0 = kl_now();
    w->integrity_launches++;
    unsigned char guard[2 * GUARD_BYTES + 512];
    for (unsigned i = 0; i < w->task->nargs; i++) {
        const kl_arg *a = &w->task->args[i];
        if (a->dtype == KL_DTYPE_NONE) continue;
        dbuf *d = &s->dev[i];
        if (a->role == KL_ROLE_IN && d->bytes && input_unchanged(w, s, i, who)) return -1;
        /* the guard before (the shift, up to the guard size) and after the data */
        size_t before = d->shift < GUARD_BYTES ? d->shift : GUARD_BYTES;
        size_t after = d->alloc - d->shift - d->bytes;
        if (after > sizeof guard - GUARD_BYTES) after = sizeof guard - GUARD_BYTES;
        if (before && rtc(w, w->rt.d2h(guard, (char *)d->ptr - before, before), "reading a guard zone")) return -1;
        if (after && rtc(w, w->rt.d2h(guard + before, (char *)d->ptr + d->bytes, after), "reading a guard zone")) return -1;
        for (size_t k = 0; k < before + after; k++) {
            if (guard[k] != GUARD_BYTE) {
                bool pre = k < before;
                integrity_note(w, "the %s wrote %s '%s' at %s (byte %s%zu)", who,
                               pre ? "before the start of" : "past the end of", a->name, s->shape->label, pre ? "-" : "+",
                               pre ? before - k : k - before);
                break;
            }
        }
    }
    w->tm.integrity += kl_now() - t0;
    return 0;
}

/* Before a candidate's launch: the SMs' shared memory filled with w->smem_byte (then reset to
 * 0xFF for the next), so that a kernel reading shared memory it never wrote reads a poison,
 * whatever ran before it (alone on the GPU or beside other gates). A failure to poison is
 * not the candidate's: it is logged and weakens the evidence (the verdict is not stored). */
static int smem_poison(worker *w, launcher *L)
{
    if (L != &w->cand || !w->poison_smem) return 0;
    int byte = w->smem_byte;
    w->smem_byte = 0xFF;
    if (byte < 0) return 0;
    int rc = w->rt.smem_poison(byte);
    if (rc == KL_RT_OK) {
        w->smem_poisoned++;
        return 0;
    }
    if (rc == KL_RT_ERR_STICKY) return rtc(w, rc, "poisoning shared memory");
    if (!w->smem_poison_failed) kl_log(KL_LOG_WARN, "poisoning shared memory failed: %s", w->rt.error());
    w->smem_poison_failed = true;
    return 0;
}

/* Run L on s (already uploaded): launch, synchronize only the worker's stream, read back. */
static int run_once(worker *w, launcher *L, argset *s)
{
    double t0 = kl_now();
    if (smem_poison(w, L)) return -1;
    if (rtc(w, w->rt.device_sync(), "synchronizing before the launch")) return -1;
    if (launch(w, L, s)) return -1;
    if (rtc(w, w->rt.stream_sync(w->stream), "synchronizing the launch stream")) return -1;
    w->tm.launch += kl_now() - t0;
    if (argset_read(w, s)) return -1;
    if (rtc(w, w->rt.device_sync(), "synchronizing the device after the launch")) return -1;
    if (L == &w->cand && argset_integrity(w, s, "candidate")) return -1;
    return 0;
}

/* ---- the input cache: fills and references on the pool --------------------------------------- */

static void entry_free(worker *w, input_entry *e)
{
    bool dev_ok = w->rt_ready && w->exit_code != KL_WORKER_EXIT_CUDA;
    for (unsigned i = 0; i < w->task->nargs; i++) {
        if (e->inputs) free(e->inputs[i]);
        if (e->ref) free(e->ref[i]);
        if (e->dev && e->dev[i] && dev_ok) w->rt.free(e->dev[i]);
    }
    free(e->dev);
    free(e->digest);
    free(e->inputs);
    free(e->counts);
    free(e->ref);
    free(e);
}

/* After every pool task has finished (kl_pool_stop). */
static void inputs_free(worker *w)
{
    while (w->entries) {
        input_entry *e = w->entries;
        w->entries = e->next;
        entry_free(w, e);
    }
}

/* Build (or find in the cache) and load the task's reference, once; a failure is kept and
 * reported by the first stage that needs a reference. With ref_mu held, or before the pool
 * runs anything. */
static void reference_load(worker *w)
{
    double t0 = kl_now();
    w->ref_load_tried = true;
    w->ref_load_st = kl_reference_load(w->task, w->cache_dir, &w->ref, &w->ref_load_err);
    pthread_mutex_lock(&w->cache_mu);
    w->tm.reference_load += kl_now() - t0;
    pthread_mutex_unlock(&w->cache_mu);
}

/* On the pool: the reference at (e->shape, e->seed), one at a time. */
static void reference_task(void *arg)
{
    input_entry *e = arg;
    worker *w = e->w;
    double **outs = calloc(w->task->nargs, sizeof *outs);
    kl_error err = {0};
    kl_status st;
    pthread_mutex_lock(&w->cache_mu);
    bool cancelled = w->cancel;
    pthread_mutex_unlock(&w->cache_mu);
    pthread_mutex_lock(&w->ref_mu);
    if (!w->ref_load_tried && !cancelled) reference_load(w); /* normally done before CUDA started */
    double t0 = kl_now();
    if (cancelled) {
        st = kl_error_set(&err, KL_ERR_INVALID, "the job ended before the reference at %s was needed", e->shape->label);
    } else if (!outs) {
        st = kl_error_set(&err, KL_ERR_NOMEM, "out of memory");
    } else if (w->ref_load_st != KL_OK) {
        st = w->ref_load_st;
        err = w->ref_load_err;
    } else {
        /* inputs as filled; outputs are poisoned by the reference's own shim */
        st = kl_reference_run(w->ref, w->task, e->shape, e->inputs, outs, &err);
        if (st != KL_OK) kl_error_prefix(&err, "the reference at %s", e->shape->label);
    }
    double dt = kl_now() - t0;
    pthread_mutex_unlock(&w->ref_mu);
    kl_log(KL_LOG_DEBUG, "worker: reference at %s seed %llu: %.3f s", e->shape->label, (unsigned long long)e->seed, dt);
    pthread_mutex_lock(&w->cache_mu);
    e->ref_st = st;
    if (st == KL_OK) {
        e->ref = outs;
        outs = NULL;
    } else {
        e->ref_err = err;
    }
    e->ref_done = true;
    w->tm.reference_cpu += dt;
    w->tm.references++;
    pthread_cond_broadcast(&w->cache_cv);
    pthread_mutex_unlock(&w->cache_mu);
    free(outs);
}

/* With cache_mu held: queue e's reference once it is filled and wanted. The reference runs
 * on the pool when there is one, else here (the caller then must not hold cache_mu: see
 * entry_want_ref). */
static bool entry_ref_due(input_entry *e) { return e->filled && e->fill_st == KL_OK && e->want_ref && !e->ref_queued; }

static void entry_queue_ref(worker *w, input_entry *e)
{
    kl_error ignore;
    if (w->pool && kl_pool_submit(w->pool, reference_task, e, &ignore) == KL_OK) return;
    reference_task(e);
}

/* Called once per tensor when its fill is complete (on the pool thread that finished it). */
static void entry_tensor_done(void *ctx, kl_status st, const kl_error *err)
{
    input_entry *e = ctx;
    worker *w = e->w;
    pthread_mutex_lock(&w->cache_mu);
    if (st != KL_OK && e->fill_st == KL_OK) {
        e->fill_st = st;
        e->fill_err = *err;
    }
    bool queue = false;
    if (--e->fills_left == 0) {
        e->filled = true;
        w->tm.fills++;
        if (entry_ref_due(e)) e->ref_queued = queue = true;
        pthread_cond_broadcast(&w->cache_cv);
    }
    pthread_mutex_unlock(&w->cache_mu);
    if (queue) entry_queue_ref(w, e);
}

/* Find the entry of (shape, seed), or create it and queue its fills (and its reference when
 * want_ref). Never waits. -1 (w->error set) on a harness failure. */
static int inputs_schedule(worker *w, const kl_shape *shape, uint64_t seed, bool want_ref, input_entry **out)
{
    *out = NULL;
    pthread_mutex_lock(&w->cache_mu);
    for (input_entry *e = w->entries; e; e = e->next)
        if (e->shape == shape && e->seed == seed) {
            *out = e;
            break;
        }
    bool queue = false;
    if (*out && want_ref && !(*out)->want_ref) {
        (*out)->want_ref = true;
        if (entry_ref_due(*out)) (*out)->ref_queued = queue = true;
    }
    pthread_mutex_unlock(&w->cache_mu);
    if (queue) entry_queue_ref(w, *out);
    if (*out) return 0;

    const kl_task *t = w->task;
    input_entry *e = calloc(1, sizeof *e);
    if (e) {
        e->inputs = calloc(t->nargs, sizeof *e->inputs);
        e->counts = calloc(t->nargs, sizeof *e->counts);
    }
    if (!e || !e->inputs || !e->counts) {
        if (e) free(e->inputs), free(e->counts);
        free(e);
        return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    }
    e->w = w;
    e->shape = shape;
    e->seed = seed;
    e->want_ref = want_ref;
    e->fill_st = e->ref_st = KL_OK;
    kl_error err = {0};
    unsigned tensors = 0;
    for (unsigned i = 0; i < t->nargs; i++) {
        const kl_arg *a = &t->args[i];
        if (a->dtype == KL_DTYPE_NONE || a->role == KL_ROLE_OUT) continue;
        if (kl_task_arg_count(t, shape, i, &e->counts[i], &err) != KL_OK) {
            entry_free(w, e);
            return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        }
        size_t es = kl_dtype_size(a->dtype);
        if (e->counts[i] < 0 || (uint64_t)e->counts[i] > (SIZE_MAX / 2) / es) {
            entry_free(w, e);
            return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s at %s: %lld elements do not fit in memory", a->name,
                        shape->label, (long long)e->counts[i]);
        }
        size_t bytes = (size_t)e->counts[i] * es;
        e->inputs[i] = malloc(bytes ? bytes : 1);
        if (!e->inputs[i]) {
            entry_free(w, e);
            return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s at %s: out of host memory for %zu bytes", a->name,
                        shape->label, bytes);
        }
        tensors++;
    }
    /* one count for the scheduling itself, so that no fill completes the entry early */
    e->fills_left = tensors + 1;
    pthread_mutex_lock(&w->cache_mu);
    e->next = w->entries;
    w->entries = e;
    pthread_mutex_unlock(&w->cache_mu);
    for (unsigned i = 0; i < t->nargs; i++) {
        if (!e->inputs[i]) continue;
        kl_error ferr = {0};
        if (kl_fill_submit(w->pool, t, shape, i, seed, e->inputs[i], e->counts[i], entry_tensor_done, e, &ferr) != KL_OK)
            entry_tensor_done(e, ferr.status ? ferr.status : KL_ERR_NOMEM, &ferr);
    }
    kl_error none = {0};
    entry_tensor_done(e, KL_OK, &none);
    *out = e;
    return 0;
}

/* With cache_mu held: wait for the pool until w->deadline. false when it passed: the job is
 * abandoned as the harness's failure (a slow reference or fill is never the candidate's), and
 * the pool is left running as the worker exits. */
static bool cache_wait(worker *w, const char *what, const kl_shape *shape)
{
    if (!w->deadline) {
        pthread_cond_wait(&w->cache_cv, &w->cache_mu);
        return true;
    }
    double left = w->deadline - kl_now();
    if (left > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double end = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + left;
        ts.tv_sec = (time_t)end;
        ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        if (pthread_cond_timedwait(&w->cache_cv, &w->cache_mu, &ts) == 0 || kl_now() < w->deadline) return true;
    }
    w->abandon = true;
    pthread_mutex_unlock(&w->cache_mu);
    fail(w, KL_WORKER_EXIT_HARNESS, NULL, false,
         "the %s at %s did not finish within the worker's time (%.0f s): a slow reference is the task's "
         "limit, not the candidate's failure (set reference_max_flops in task.json, or a longer --timeout)",
         what, shape->label, w->deadline - w->tm.start);
    pthread_mutex_lock(&w->cache_mu);
    return false;
}

/* The inputs of (shape, seed), waiting for their fill. */
static int inputs_get(worker *w, const kl_shape *shape, uint64_t seed, input_entry **out)
{
    input_entry *e;
    if (inputs_schedule(w, shape, seed, false, &e)) return -1;
    double t0 = kl_now();
    pthread_mutex_lock(&w->cache_mu);
    while (!e->filled)
        if (!cache_wait(w, "inputs' fill", shape)) {
            pthread_mutex_unlock(&w->cache_mu);
            return -1;
        }
    kl_status st = e->fill_st;
    kl_error err = e->fill_err;
    pthread_mutex_unlock(&w->cache_mu);
    w->tm.wait_inputs += kl_now() - t0;
    if (st != KL_OK) return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
    *out = e;
    return 0;
}

/* The reference's outputs for (s->shape, s->seed), computed once per job. */
static int reference_get(worker *w, argset *s, double ***outs)
{
    input_entry *e;
    if (inputs_schedule(w, s->shape, s->seed, true, &e)) return -1;
    double t0 = kl_now();
    pthread_mutex_lock(&w->cache_mu);
    while (!e->ref_done && !(e->filled && e->fill_st != KL_OK))
        if (!cache_wait(w, "reference", s->shape)) {
            pthread_mutex_unlock(&w->cache_mu);
            return -1;
        }
    kl_status st = e->fill_st != KL_OK ? e->fill_st : e->ref_st;
    kl_error err = e->fill_st != KL_OK ? e->fill_err : e->ref_err;
    pthread_mutex_unlock(&w->cache_mu);
    w->tm.wait_reference += kl_now() - t0;
    if (st != KL_OK) return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
    *outs = e->ref;
    return 0;
}

/* ---- slices on the pool ----------------------------------------------------------------------- */

/* One batch of slices: the pool's threads and the calling thread take slices until none are
 * left, so a pool busy with a reference never holds the caller up for more than its own share.
 * The batch lives until its last user lets go (a pool task may start after the work is done). */
typedef struct par_batch {
    void (*fn)(void *arg, unsigned k);
    void *arg;
    unsigned n, next, done, users;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} par_batch;

static void par_release(par_batch *b)
{
    pthread_mutex_lock(&b->mu);
    bool last = --b->users == 0;
    pthread_mutex_unlock(&b->mu);
    if (!last) return;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}

static void par_take(par_batch *b)
{
    for (;;) {
        pthread_mutex_lock(&b->mu);
        if (b->next >= b->n) {
            pthread_mutex_unlock(&b->mu);
            return;
        }
        unsigned k = b->next++;
        pthread_mutex_unlock(&b->mu);
        b->fn(b->arg, k);
        pthread_mutex_lock(&b->mu);
        if (++b->done == b->n) pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
}

static void par_task(void *arg)
{
    par_take(arg);
    par_release(arg);
}

static void par_run(void *ctx, unsigned n, void (*fn)(void *arg, unsigned k), void *arg)
{
    worker *w = ctx;
    par_batch *b = calloc(1, sizeof *b);
    if (!b) {
        for (unsigned k = 0; k < n; k++) fn(arg, k);
        return;
    }
    b->fn = fn;
    b->arg = arg;
    b->n = n;
    b->users = 1;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    unsigned helpers = kl_pool_threads(w->pool) < n - 1 ? kl_pool_threads(w->pool) : n - 1;
    for (unsigned i = 0; i < helpers; i++) {
        kl_error ignore;
        pthread_mutex_lock(&b->mu);
        b->users++;
        pthread_mutex_unlock(&b->mu);
        if (kl_pool_submit(w->pool, par_task, b, &ignore) != KL_OK) {
            par_release(b);
            break;
        }
    }
    par_take(b);
    pthread_mutex_lock(&b->mu);
    while (b->done < b->n) pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    par_release(b);
}

/* Compare s's outputs with the reference (or with `against`, another argset's outputs, with
 * twice the tolerance), in slices on the pool. Appends per-output documents to outputs_json; *ok. */
static int compare_outputs(worker *w, argset *s, argset *against, int pass, json_t *outputs_json, bool *ok)
{
    double **ref = NULL;
    if (!against && reference_get(w, s, &ref)) return -1;
    double t0 = kl_now();
    *ok = true;
    kl_error err = {0};
    unsigned threads = kl_pool_threads(w->pool);
    kl_parallel par = {par_run, w, threads ? 2 * (threads + 1) : 1};
    for (unsigned i = 0; i < w->task->nargs; i++) {
        const kl_arg *a = &w->task->args[i];
        if (a->dtype == KL_DTYPE_NONE || a->role == KL_ROLE_IN) continue;
        kl_compare_result r;
        unsigned char poison[8];
        memset(poison, kl_poison_byte(a->dtype, pass), sizeof poison);
        kl_status st;
        if (against) {
            kl_tolerance tol2 = w->tol;
            tol2.rel_l2 *= 2;
            if (tol2.max_abs >= 0) tol2.max_abs *= 2;
            st = kl_compare_par(a->dtype, s->got[i], NULL, against->got[i], s->counts[i], &tol2, NULL,
                                threads ? &par : NULL, &r, &err);
        } else {
            st = kl_compare_par(a->dtype, s->got[i], ref[i], NULL, s->counts[i], &w->tol,
                                a->role == KL_ROLE_OUT ? poison : NULL, threads ? &par : NULL, &r, &err);
        }
        if (st != KL_OK) return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        if (!r.ok) *ok = false;
        json_t *o = json_pack("{s:s, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:s}", "arg", a->name, "rel_l2",
                              jreal(r.rel_l2), "max_abs", jreal(r.max_abs), "first_bad", (json_int_t)r.first_bad, "nan",
                              (json_int_t)r.nan, "inf", (json_int_t)r.inf, "unwritten", (json_int_t)r.unwritten,
                              "mismatched", (json_int_t)r.mismatched, "count", (json_int_t)r.count, "ok", r.ok,
                              "detail", r.detail);
        if (outputs_json && o) json_array_append_new(outputs_json, o);
        else json_decref(o);
    }
    w->tm.compare += kl_now() - t0;
    return 0;
}

static double shape_cost(worker *w, const kl_shape *shape, const char *expr)
{
    int64_t v;
    kl_error err = {0};
    if (!expr || kl_task_eval(w->task, shape, expr, &v, &err) != KL_OK) return -1;
    return (double)v;
}

static int64_t shape_elements(worker *w, const kl_shape *shape)
{
    int64_t total = 0, c;
    kl_error err = {0};
    for (unsigned i = 0; i < w->task->nargs; i++)
        if (w->task->args[i].dtype != KL_DTYPE_NONE && kl_task_arg_count(w->task, shape, i, &c, &err) == KL_OK) total += c;
    return total;
}

/* Shapes whose cost.flops is past reference_max_flops are checked against the baseline. */
static void apply_reference_limit(worker *w, const gate_opts *o)
{
    if (o->reference_max_flops < 0) return;
    for (unsigned k = 0; k < w->nshapes; k++) {
        double f = shape_cost(w, w->shapes[k].shape, w->task->cost_flops);
        if (f > o->reference_max_flops) w->shapes[k].reference = false;
    }
}

/* The job's seeds the correct stage runs at this shape. */
static unsigned shape_seeds(const worker *w, const shape_req *req)
{
    return req->seeds && req->seeds < w->nseeds ? req->seeds : w->nseeds;
}

/* ---- stage: correct --------------------------------------------------------------------------- */

static int stage_correct(worker *w, const gate_opts *o, bool *passed)
{
    w->stage = "correct";
    json_t *entries = json_array();
    json_object_set_new(w->result, "correct", entries);
    *passed = true;
    bool need_baseline = false;
    for (unsigned k = 0; k < w->nshapes; k++)
        if (!w->shapes[k].reference) need_baseline = true;
    /* a baseline that stands in for the reference is validated against it first */
    bool baseline_valid = false;
    if (need_baseline && w->base.present) {
        json_t *bc = json_array();
        json_object_set_new(w->result, "baseline_correct", bc);
        baseline_valid = true;
        unsigned validated = 0;
        for (unsigned k = 0; k < w->nshapes; k++) {
            if (!w->shapes[k].reference) continue;
            argset s;
            int rc = argset_init(w, &s, w->shapes[k].shape, GUARD_BYTES);
            bool ok = false;
            json_t *outs = json_array();
            if (!rc) rc = argset_fill(w, &s, w->seeds[0]);
            if (!rc) rc = argset_upload(w, &s, 0);
            if (!rc) rc = run_once(w, &w->base, &s);
            if (!rc) rc = compare_outputs(w, &s, NULL, 0, outs, &ok);
            json_array_append_new(bc, json_pack("{s:s, s:I, s:b, s:o}", "shape", s.shape->label, "seed",
                                                (json_int_t)w->seeds[0], "ok", ok, "outputs", outs));
            argset_release(w, &s);
            if (rc) return -1;
            if (!ok) baseline_valid = false;
            validated++;
        }
        if (!validated) baseline_valid = false;
    }

    for (unsigned k = 0; k < w->nshapes; k++) {
        const shape_req *req = &w->shapes[k];
        for (unsigned si = 0; si < shape_seeds(w, req); si++) {
            argset s, b;
            memset(&b, 0, sizeof b);
            if (argset_init(w, &s, req->shape, GUARD_BYTES) || argset_fill(w, &s, w->seeds[si])) {
                argset_release(w, &s);
                return -1;
            }
            bool use_base = !req->reference;
            if (use_base && baseline_valid) {
                if (argset_init(w, &b, req->shape, GUARD_BYTES) || argset_fill(w, &b, w->seeds[si]) ||
                    argset_upload(w, &b, 0) || run_once(w, &w->base, &b)) {
                    argset_release(w, &s);
                    argset_release(w, &b);
                    return -1;
                }
            }
            for (int pass = 0; pass < 2; pass++) {
                json_t *outs = json_array();
                json_t *e = json_pack("{s:s, s:I, s:s}", "shape", req->shape->label, "seed", (json_int_t)w->seeds[si],
                                      "poison", pass == 0 ? "nan" : "value");
                json_array_append_new(entries, e);
                bool ok = false;
                if (use_base && !baseline_valid) {
                    /* the shape cannot be checked: the task's limit, not the candidate's failure */
                    json_object_set_new(e, "checked_against", json_string("none"));
                    json_object_set_new(e, "ok", json_false());
                    json_decref(outs);
                    argset_release(w, &s);
                    argset_release(w, &b);
                    return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false,
                                "%s is too large for the reference (reference_max_flops, or slower than %.0f s on "
                                "this host), and %s: it cannot be checked",
                                req->shape->label, o->reference_budget_s,
                                w->base.present ? "the baseline failed its own check at the referenced shapes"
                                                : "there is no baseline to stand in");
                }
                int rc = argset_upload(w, &s, pass);
                w->smem_byte = pass == 0 ? 0xFF : 0x7B; /* NaN, then a large finite value */
                if (!rc) rc = run_once(w, &w->cand, &s);
                if (!rc) rc = compare_outputs(w, &s, use_base ? &b : NULL, pass, outs, &ok);
                json_object_set_new(e, "checked_against", json_string(use_base ? "baseline" : "reference"));
                if (use_base) json_object_set_new(e, "detail", json_string("checked against baseline"));
                json_object_set_new(e, "ok", json_boolean(ok));
                json_object_set_new(e, "outputs", outs);
                if (rc) {
                    argset_release(w, &s);
                    argset_release(w, &b);
                    return -1;
                }
                if (!ok) *passed = false;
            }
            argset_release(w, &s);
            argset_release(w, &b);
        }
    }
    return 0;
}

/* ---- stage: determinism ------------------------------------------------------------------------ */

/* The largest job shape compared with the reference, and the smallest. */
static void pick_shapes(worker *w, const kl_shape **large_ref, const kl_shape **small_ref, const kl_shape **largest)
{
    *large_ref = *small_ref = *largest = NULL;
    int64_t lmax = -1, smin = INT64_MAX, amax = -1;
    for (unsigned k = 0; k < w->nshapes; k++) {
        int64_t n = shape_elements(w, w->shapes[k].shape);
        if (n > amax) {
            amax = n;
            *largest = w->shapes[k].shape;
        }
        if (!w->shapes[k].reference) continue;
        if (n > lmax) {
            lmax = n;
            *large_ref = w->shapes[k].shape;
        }
        if (n < smin) {
            smin = n;
            *small_ref = w->shapes[k].shape;
        }
    }
}

/* One determinism trial: shared memory poisoned with smem_byte first (-1: left as the previous
 * launch left it). */
static int det_trial(worker *w, argset *s, json_t *trials, const char *name, int smem_byte, bool *all_ok)
{
    json_t *outs = json_array();
    bool ok = false;
    int rc = argset_upload(w, s, 0);
    w->smem_byte = smem_byte;
    if (!rc) rc = run_once(w, &w->cand, s);
    if (!rc) rc = compare_outputs(w, s, NULL, 0, outs, &ok);
    json_array_append_new(trials, json_pack("{s:s, s:s, s:I, s:b, s:o}", "trial", name, "shape", s->shape->label, "seed",
                                            (json_int_t)s->seed, "ok", ok, "outputs", outs));
    if (!ok) *all_ok = false;
    return rc;
}

/* Smaller shapes run right after a large one in the determinism stage. */
#define SMALL_AFTER_LARGE 3

static int stage_determinism(worker *w, const gate_opts *o, bool *passed)
{
    w->stage = "determinism";
    json_t *doc = json_object();
    json_t *trials = json_array();
    json_object_set_new(w->result, "determinism", doc);
    json_object_set_new(doc, "trials", trials);
    *passed = true;
    const kl_shape *mid, *small, *large;
    pick_shapes(w, &mid, &small, &large);
    /* the repeat trials at the largest reference shape other than the timed one: the correct
     * stage already ran that one at every seed and poison, and a repeat there costs the most */
    const kl_shape *timed = o->profile.on ? kl_task_shape(w->task, o->profile.shape) : NULL;
    if (timed && mid == timed) {
        int64_t best = -1;
        for (unsigned k = 0; k < w->nshapes; k++) {
            const kl_shape *sh = w->shapes[k].shape;
            int64_t n = shape_elements(w, sh);
            if (w->shapes[k].reference && sh != timed && n > best) {
                best = n;
                mid = sh;
            }
        }
    }
    if (!mid) {
        json_object_set_new(doc, "ok", json_false());
        json_object_set_new(doc, "detail", json_string("no job shape is compared with the reference"));
        *passed = false;
        return 0;
    }
    uint64_t s1 = w->seeds[0], s2 = w->nseeds > 1 ? w->seeds[1] : w->seeds[0] + 1;
    kl_strbuf why = KL_STRBUF_INIT;
    argset s, t;
    memset(&t, 0, sizeof t);
    int rc = argset_init(w, &s, mid, GUARD_BYTES);
    /* 1. the same inputs twice: the same bits (exact tasks) or within tolerance */
    if (!rc) rc = argset_fill(w, &s, s1);
    if (!rc) rc = det_trial(w, &s, trials, "first run", 0xFF, passed);
    void **first = NULL;
    if (!rc) {
        first = calloc(w->task->nargs, sizeof *first);
        if (!first) rc = fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
        for (unsigned i = 0; !rc && i < w->task->nargs; i++) {
            if (!s.got[i]) continue;
            first[i] = malloc(s.bytes[i] ? s.bytes[i] : 1);
            if (!first[i]) rc = fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
            else memcpy(first[i], s.got[i], s.bytes[i]);
        }
    }
    /* shared memory now holds zeros: a kernel that reads it unwritten gives other bits */
    if (!rc) rc = det_trial(w, &s, trials, "same inputs again", 0x00, passed);
    if (!rc) {
        bool bitwise = true;
        for (unsigned i = 0; i < w->task->nargs; i++) {
            const kl_arg *a = &w->task->args[i];
            if (!first || !first[i]) continue;
            int64_t fd;
            int64_t nd = kl_compare_bits(a->dtype, s.got[i], first[i], s.counts[i], &fd);
            if (!nd) continue;
            bitwise = false;
            kl_compare_result r;
            kl_error err = {0};
            kl_compare_typed(a->dtype, s.got[i], first[i], s.counts[i], &w->tol, &r, &err);
            if (w->tol.exact || !r.ok) {
                *passed = false;
                if (!why.len)
                    kl_strbuf_addf(&why, "two runs on the same inputs differ: '%s' at %s, %lld elements, first at %lld%s",
                                   a->name, mid->label, (long long)nd, (long long)fd,
                                   w->tol.exact ? " (the task is exact)" : " (beyond the tolerance)");
            }
        }
        json_object_set_new(doc, "bitwise_repeatable", json_boolean(bitwise));
    }
    if (first) {
        for (unsigned i = 0; i < w->task->nargs; i++) free(first[i]);
        free(first);
    }
    /* 2. the same buffers, new values: an answer cached by pointer fails */
    if (!rc) rc = argset_fill(w, &s, s2);
    if (!rc) rc = det_trial(w, &s, trials, "same buffers, new inputs", 0x7B, passed);
    if (!rc && !*passed && !why.len)
        kl_strbuf_addf(&why, "wrong after the same buffers were refilled with new inputs (an answer cached across calls?)");
    argset_release(w, &s);
    /* 3. fresh buffers at a shifted address: the allocator hands freed addresses back, so
     * the shift is what makes every pointer new */
    if (!rc) rc = argset_init(w, &t, mid, 3 * GUARD_BYTES);
    if (!rc) rc = argset_fill(w, &t, s1);
    if (!rc) {
        bool before = *passed;
        rc = det_trial(w, &t, trials, "fresh shifted buffers", 0xFF, passed);
        if (!rc && before && !*passed && !why.len) kl_strbuf_addf(&why, "wrong in freshly allocated, shifted buffers");
    }
    argset_release(w, &t);
    /* 4. the smaller shapes right after a large one, shared memory left as the large run left
     * it: stale shared memory or state shows there (up to SMALL_AFTER_LARGE of them, smallest
     * first, each after its own large run) */
    unsigned small_after_large = 0;
    if (!rc && large && small && large != small) {
        const kl_shape *done[SMALL_AFTER_LARGE];
        for (unsigned round = 0; !rc && round < SMALL_AFTER_LARGE; round++) {
            /* the smallest referenced shape not tried yet, smaller than the large one */
            const kl_shape *pick = NULL;
            int64_t pick_n = INT64_MAX, large_n = shape_elements(w, large);
            for (unsigned k = 0; k < w->nshapes; k++) {
                const kl_shape *sh = w->shapes[k].shape;
                int64_t n = shape_elements(w, sh);
                bool seen = false;
                for (unsigned q = 0; q < round; q++) seen |= done[q] == sh;
                if (!w->shapes[k].reference || seen || sh == large || n >= large_n || n >= pick_n) continue;
                pick = sh;
                pick_n = n;
            }
            if (!pick) break;
            done[round] = pick;
            argset L;
            rc = argset_init(w, &L, large, GUARD_BYTES);
            if (!rc) rc = argset_fill(w, &L, s1);
            if (!rc) rc = argset_upload(w, &L, 0);
            w->smem_byte = 0xFF;
            if (!rc) rc = run_once(w, &w->cand, &L);
            argset_release(w, &L);
            if (!rc) rc = argset_init(w, &t, pick, GUARD_BYTES);
            if (!rc) rc = argset_fill(w, &t, s2);
            if (!rc) {
                bool before = *passed;
                rc = det_trial(w, &t, trials, "small shape after a large one", -1, passed);
                if (!rc && before && !*passed && !why.len)
                    kl_strbuf_addf(&why, "wrong at %s right after a run at %s (state left from the larger run?)",
                                   pick->label, large->label);
                if (!rc) small_after_large++;
            }
            argset_release(w, &t);
        }
    }
    /* how strong the evidence is: the gate stores no pass made on weaker evidence */
    if (!rc) {
        unsigned want_small = 0;
        int64_t large_n = large ? shape_elements(w, large) : 0;
        for (unsigned k = 0; large && k < w->nshapes; k++)
            if (w->shapes[k].reference && w->shapes[k].shape != large && shape_elements(w, w->shapes[k].shape) < large_n)
                want_small++;
        if (want_small > SMALL_AFTER_LARGE) want_small = SMALL_AFTER_LARGE;
        json_object_set_new(doc, "evidence",
                            json_pack("{s:b, s:i, s:i, s:b, s:b}", "smem_poisoned",
                                      w->poison_smem && !w->smem_poison_failed, "small_after_large",
                                      (int)small_after_large, "small_after_large_wanted", (int)want_small,
                                      "repeat", 1, "complete",
                                      w->poison_smem && !w->smem_poison_failed && small_after_large >= want_small));
    }
    if (!rc) {
        json_object_set_new(doc, "ok", json_boolean(*passed));
        if (*passed)
            json_object_set_new(doc, "detail",
                                json_string("repeatable, right after refilling the same buffers, in fresh shifted "
                                            "buffers and after a larger shape"));
        else
            json_object_set_new(doc, "detail", json_string(why.len ? kl_strbuf_str(&why) : "a trial failed"));
    }
    kl_strbuf_release(&why);
    return rc;
}

/* ---- stage: stream contract -------------------------------------------------------------------- */

static int stage_stream(worker *w, const gate_opts *o, const kl_shape *shape, bool *passed)
{
    w->stage = "stream";
    json_t *doc = json_object();
    json_object_set_new(w->result, "stream", doc);
    json_object_set_new(doc, "shape", json_string(shape->label));
    *passed = true;
    kl_strbuf why = KL_STRBUF_INIT;
    argset s;
    int rc = argset_init(w, &s, shape, GUARD_BYTES);
    if (!rc) rc = argset_fill(w, &s, w->seeds[0]);
    void **early = NULL;
    if (!rc) {
        early = calloc(w->task->nargs, sizeof *early);
        if (!early) rc = fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
        for (unsigned i = 0; !rc && i < w->task->nargs; i++)
            if (s.got[i] && !(early[i] = malloc(s.bytes[i] ? s.bytes[i] : 1)))
                rc = fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    }
    const unsigned trials = 3;
    for (unsigned tr = 0; !rc && tr < trials && *passed; tr++) {
        rc = argset_upload(w, &s, 0);
        if (!rc) rc = rtc(w, w->rt.timer_begin(), "starting the timer");
        if (!rc) rc = launch(w, &w->cand, &s);
        if (!rc) rc = rtc(w, w->rt.stream_sync(w->stream), "synchronizing the launch stream");
        /* "now" on the GPU's clock: a marker kernel on the runtime's own high-priority stream;
         * a kernel of the candidate's that ends after it started was left running */
        if (!rc) rc = rtc(w, w->rt.mark(), "marking the synchronize on the GPU's clock");
        int idle = 1;
        if (!rc) rc = rtc(w, w->rt.device_idle(50, &idle), "querying the device");
        if (!rc) rc = argset_read(w, &s);
        for (unsigned i = 0; !rc && i < w->task->nargs; i++)
            if (s.got[i]) memcpy(early[i], s.got[i], s.bytes[i]);
        kl_rt_timing t;
        if (!rc) rc = rtc(w, w->rt.timer_end(&t), "stopping the timer"); /* synchronizes the device */
        if (!rc) rc = argset_read(w, &s);
        if (rc) break;
        if (!idle) {
            *passed = false;
            kl_strbuf_addf(&why, "work left running on another stream: the device was still busy after the given "
                                 "stream was synchronized");
            break;
        }
        if (t.timer == KL_RT_TIMER_CUPTI && t.marked && t.mark_ns &&
            t.last_kernel_end_ns > t.mark_ns + (uint64_t)(o->stream_margin_us * 1e3)) {
            *passed = false;
            kl_strbuf_addf(&why, "work left running on another stream: a kernel ended %.1f us after the given stream "
                                 "was synchronized",
                           (double)(t.last_kernel_end_ns - t.mark_ns) * 1e-3);
            break;
        }
        for (unsigned i = 0; i < w->task->nargs; i++) {
            if (!s.got[i]) continue;
            int64_t first;
            int64_t nd = kl_compare_bits(w->task->args[i].dtype, early[i], s.got[i], s.counts[i], &first);
            if (nd) {
                *passed = false;
                kl_strbuf_addf(&why, "outputs were incomplete when the given stream was synchronized: '%s' changed in "
                                     "%lld elements afterwards, first at %lld (work left running on another stream)",
                               w->task->args[i].name, (long long)nd, (long long)first);
                break;
            }
        }
    }
    if (early) {
        for (unsigned i = 0; i < w->task->nargs; i++) free(early[i]);
        free(early);
    }
    argset_release(w, &s);
    if (!rc) {
        json_object_set_new(doc, "ok", json_boolean(*passed));
        json_object_set_new(doc, "trials", json_integer(trials));
        json_object_set_new(doc, "detail",
                            json_string(*passed ? "outputs complete after synchronizing only the given stream; the "
                                                  "device idle then"
                                                : kl_strbuf_str(&why)));
    }
    kl_strbuf_release(&why);
    return rc;
}

/* ---- stage: profile -------------------------------------------------------------------------- */

static json_t *times_doc(const double *x, unsigned n, bool with_times, kl_stats *st)
{
    kl_error err = {0};
    if (kl_stats_compute(x, n, st, &err) != KL_OK) return json_null();
    json_t *d = json_pack("{s:o, s:o, s:o, s:o, s:o, s:I}", "median_ms", jreal(st->median), "q1_ms", jreal(st->q1), "q3_ms",
                          jreal(st->q3), "min_ms", jreal(st->min), "max_ms", jreal(st->max), "reps", (json_int_t)n);
    if (with_times) {
        json_t *a = json_array();
        for (unsigned i = 0; i < n; i++) json_array_append_new(a, jreal(x[i]));
        json_object_set_new(d, "times_ms", a);
    }
    return d;
}

/* One timed repetition inside a batch: inout buffers restored, L2 flushed, a window around
 * one launch. */
static int timed_rep(worker *w, const profile_opts *p, launcher *L, argset *s, dbuf *pristine)
{
    for (unsigned i = 0; i < w->task->nargs; i++)
        if (pristine[i].base && rtc(w, w->rt.d2d(s->dev[i].ptr, pristine[i].base, s->bytes[i]), "restoring an inout buffer"))
            return -1;
    if (p->flush_l2 && rtc(w, w->rt.l2_flush(), "flushing L2")) return -1;
    if (rtc(w, w->rt.batch_open(), "starting the timer")) return -1;
    if (launch(w, L, s)) return -1;
    return rtc(w, w->rt.batch_close(), "stopping the timer");
}

/* Up to `rounds` rounds of the nl launchers in turn (candidate, baseline, candidate, …) in one
 * batch: CUPTI is flushed once for all of them. The device times go to times[l][first + r] and
 * the windows' host times to host[l][first + r] (times NULL: warm-up, dropped); a round is not
 * started once `deadline` (kl_now) has passed and at least KL_PROFILE_FLOOR_REPS rounds are in.
 * *done: the rounds measured.
 *
 * With CUPTI each window is bracketed by markers on the GPU's clock (runtime.h), so a window's
 * records are its own. A candidate window with no kernel in it ran no kernel (copies and memsets
 * are not the task's work): counted in *no_kernel; the stage fails. The timer is at fault when a
 * window's markers did not come back, when a baseline window holds no kernel, or when a candidate
 * window holds none while CUPTI handed over records without timestamps: the batch is measured
 * again, up to PROFILE_BATCH_TRIES times, and then the worker fails as a harness error, which is
 * not a verdict. */
#define PROFILE_BATCH_TRIES 3
static int profile_batch(worker *w, const profile_opts *p, launcher **Ls, unsigned nl, argset *sets, dbuf **pristine,
                         unsigned rounds, double **times, double **host, unsigned first, double deadline,
                         kl_rt_timing *tbuf, unsigned *no_kernel, unsigned *done)
{
    *done = 0;
    for (unsigned attempt = 1;; attempt++) {
        if (rtc(w, w->rt.batch_begin(rounds * nl), "starting a batch of timed windows")) return -1;
        unsigned r = 0;
        for (; r < rounds; r++) {
            if (times && first + r >= KL_PROFILE_FLOOR_REPS && kl_now() >= deadline) break;
            for (unsigned l = 0; l < nl; l++)
                if (timed_rep(w, p, Ls[l], &sets[l], pristine[l])) return -1;
        }
        unsigned nw = 0;
        if (rtc(w, w->rt.batch_end(tbuf, &nw), "reading the timer")) return -1;
        if (nw != r * nl)
            return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "the timer returned %u windows for %u", nw, r * nl);
        w->tm.profile_batches++;
        unsigned unmarked = 0, base_empty = 0, cand_empty = 0, incomplete = r ? tbuf[0].incomplete : 0;
        for (unsigned k = 0; w->timer == KL_RT_TIMER_CUPTI && k < r; k++)
            for (unsigned l = 0; l < nl; l++) {
                const kl_rt_timing *t = &tbuf[k * nl + l];
                if (!t->marked) unmarked++;
                else if (t->kernels == 0 && l == 0) cand_empty++;
                else if (t->kernels == 0) base_empty++;
            }
        bool fault = unmarked || base_empty || (cand_empty && incomplete);
        if (times && fault) {
            if (attempt < PROFILE_BATCH_TRIES) {
                w->tm.profile_retries++;
                continue;
            }
            return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false,
                        "the timer could not attribute the device work of %u round(s), %u times in a row: %u "
                        "window(s) without their markers, %u baseline window(s) without a kernel, %u candidate "
                        "window(s) without a kernel, %u record(s) CUPTI handed over without timestamps; nothing is "
                        "recorded",
                        r, attempt, unmarked, base_empty, cand_empty, incomplete);
        }
        for (unsigned k = 0; times && k < r; k++)
            for (unsigned l = 0; l < nl; l++) {
                times[l][first + k] = tbuf[k * nl + l].ms;
                /* the host time beyond the task's device work (copies to and from the host
                 * are not that work: a launch that computes on the host between copies
                 * shows here) */
                host[l][first + k] = tbuf[k * nl + l].host_ms - tbuf[k * nl + l].device_ms;
                if (l == 0) host[2][first + k] = tbuf[k * nl + l].device_ms;
            }
        if (times) *no_kernel += cand_empty;
        *done = r;
        return 0;
    }
}

/* Rounds per batch once min_reps are in: the stopping rule is looked at between batches. */
#define PROFILE_BATCH_ROUNDS 10

static int stage_profile(worker *w, const gate_opts *o, bool *passed)
{
    w->stage = "profile";
    double t_setup = kl_now();
    const profile_opts *p = &o->profile;
    const kl_shape *shape = kl_task_shape(w->task, p->shape);
    if (!shape) return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: stages.profile.shape: no shape \"%s\"", p->shape);
    json_t *doc = json_object();
    json_object_set_new(w->result, "profile", doc);
    json_object_set_new(doc, "timer", json_string(w->timer == KL_RT_TIMER_CUPTI ? "cupti" : "events"));
    json_object_set_new(doc, "shape", json_string(shape->label));
    json_object_set_new(doc, "flush_l2", json_boolean(p->flush_l2));
    *passed = true;

    launcher *Ls[2] = {&w->cand, w->base.present ? &w->base : NULL};
    unsigned nl = Ls[1] ? 2 : 1;
    argset sets[2];
    dbuf *pristine[2] = {NULL, NULL};
    double *times[2] = {NULL, NULL}, *host[3] = {NULL, NULL, NULL}; /* host[2]: the candidate's device work */
    memset(sets, 0, sizeof sets);
    unsigned cap = (unsigned)p->max_reps, n = 0, no_kernel = 0;
    unsigned batch_max = (unsigned)p->min_reps > PROFILE_BATCH_ROUNDS ? (unsigned)p->min_reps : PROFILE_BATCH_ROUNDS;
    if ((unsigned)p->warmup > batch_max) batch_max = (unsigned)p->warmup;
    kl_rt_timing *tbuf = calloc((size_t)batch_max * 2, sizeof *tbuf);
    int rc = tbuf ? 0 : fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    for (unsigned l = 0; !rc && l < nl; l++) {
        rc = argset_init(w, &sets[l], shape, GUARD_BYTES);
        if (!rc) rc = argset_fill(w, &sets[l], w->seeds[0]);
        if (!rc) rc = argset_upload(w, &sets[l], 0);
        if (!rc) {
            pristine[l] = calloc(w->task->nargs, sizeof *pristine[l]);
            times[l] = calloc(cap, sizeof *times[l]);
            host[l] = calloc(cap, sizeof *host[l]);
            if (l == 0) host[2] = calloc(cap, sizeof *host[2]);
            if (!pristine[l] || !times[l] || !host[l] || !host[2])
                rc = fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
        }
        for (unsigned i = 0; !rc && i < w->task->nargs; i++) {
            if (w->task->args[i].role != KL_ROLE_INOUT || !sets[l].bytes[i]) continue;
            rc = rtc(w, w->rt.malloc(&pristine[l][i].base, sets[l].bytes[i]), "allocating an inout copy");
            if (!rc) rc = rtc(w, w->rt.d2d(pristine[l][i].base, sets[l].dev[i].ptr, sets[l].bytes[i]), "copying an inout buffer");
        }
    }
    /* the pool is idle by now (every reference was waited for); make sure nothing of it runs
     * beside the timed launches */
    kl_pool_wait_idle(w->pool);
    w->tm.profile_setup = kl_now() - t_setup;
    /* warm-up */
    double t_warm = kl_now();
    unsigned got = 0;
    if (!rc && p->warmup >= 1)
        rc = profile_batch(w, p, Ls, nl, sets, pristine, (unsigned)p->warmup, NULL, NULL, 0, 0, tbuf, &no_kernel, &got);
    w->tm.profile_warmup = kl_now() - t_warm;
    /* interleaved: candidate, baseline, candidate, baseline …, in batches; the stopping rule
     * between batches: at least min_reps, then until both medians have settled */
    double t0 = kl_now(), deadline = t0 + p->max_seconds;
    kl_profile_rule rule = {(unsigned)p->min_reps, cap, p->max_seconds, p->settle_rel};
    kl_profile_stop stop = KL_PROFILE_GO_ON;
    double rse = INFINITY;
    while (!rc && stop == KL_PROFILE_GO_ON) {
        unsigned want = n < rule.min_reps ? rule.min_reps - n : PROFILE_BATCH_ROUNDS;
        if (want > cap - n) want = cap - n;
        if (want > batch_max) want = batch_max;
        rc = profile_batch(w, p, Ls, nl, sets, pristine, want, times, host, n, deadline, tbuf, &no_kernel, &got);
        if (rc) break;
        n += got;
        const double *series[2] = {times[0], times[1]};
        stop = kl_profile_should_stop(&rule, series, nl, n, kl_now() - t0, &rse);
        if (stop == KL_PROFILE_GO_ON && got < want) stop = KL_PROFILE_MAX_SECONDS; /* cut by the deadline */
    }
    w->tm.profile_timed = kl_now() - t0;
    w->tm.profile_reps = n;
    w->tm.profile_rse = rse;
    const char *stopped = kl_profile_stop_name(stop);
    w->tm.profile_stopped = stopped;
    bool settled = stop == KL_PROFILE_SETTLED;
    if (!rc) {
        kl_stats sc, sb;
        json_object_set_new(doc, "reps", json_integer(n));
        json_object_set_new(doc, "stopped", json_string(stopped));
        json_object_set_new(doc, "settled", json_boolean(settled));
        json_object_set_new(doc, "median_rse", jreal(rse));
        json_object_set_new(doc, "candidate", times_doc(times[0], n, true, &sc));
        if (nl == 2) {
            json_object_set_new(doc, "baseline", times_doc(times[1], n, true, &sb));
            json_object_set_new(doc, "baseline_name",
                                json_string(w->base.builtin ? w->base.builtin_name : "baseline object"));
            if (sc.median > 0) json_object_set_new(doc, "speedup", jreal(sb.median / sc.median));
        }
        kl_strbuf why = KL_STRBUF_INIT;
        if (no_kernel) {
            *passed = false;
            kl_strbuf_addf(&why, "no kernel ran in %u of %u timed launches (copies and memsets are not the task's work)",
                           no_kernel, n);
        }
        /* host work the device timer does not see: the window's host time beyond its device
         * work, at its least over the repetitions (a wait for a GPU shared with others is not
         * there every time; work the launch does on the host is) */
        if (w->timer == KL_RT_TIMER_CUPTI && n > 0) {
            double unseen = INFINITY;
            for (unsigned k = 0; k < n; k++)
                if (host[0][k] < unseen) unseen = host[0][k];
            json_object_set_new(doc, "host_unseen_ms", jreal(unseen));
            kl_stats sd;
            json_object_set_new(doc, "candidate_device_work", times_doc(host[2], n, false, &sd));
            double allowed = o->host_slack_ms > sd.median ? o->host_slack_ms : sd.median;
            if (o->host_slack_ms > 0 && unseen > allowed)
                kl_strbuf_addf(&why, "%sthe launch spent at least %.3g ms on the host beyond its device work (median "
                                     "%.3g ms) in every one of %u timed launches: work done on the host, and copies to "
                                     "or from it, are not the task's",
                               why.len ? "; " : "", unseen, sd.median, n);
        }
        double bytes = shape_cost(w, shape, w->task->cost_bytes), flops = shape_cost(w, shape, w->task->cost_flops);
        double sec = sc.median * 1e-3;
        if (sec > 0 && bytes >= 0) {
            double gbs = bytes / sec / 1e9;
            json_object_set_new(doc, "bytes", json_real(bytes));
            json_object_set_new(doc, "gbs", jreal(gbs));
            if (o->copy_gbs > 0) {
                json_object_set_new(doc, "frac_copy", jreal(gbs / o->copy_gbs));
                if (gbs > o->copy_gbs * o->slack_bytes)
                    kl_strbuf_addf(&why, "%sfaster than the device ceiling: %.0f GB/s moved, the copy ceiling is %.0f GB/s",
                                   why.len ? "; " : "", gbs, o->copy_gbs);
            }
        }
        if (sec > 0 && flops >= 0) {
            double tf = flops / sec / 1e12;
            double peak = o->tensor_tflops > o->fma_tflops ? o->tensor_tflops : o->fma_tflops;
            json_object_set_new(doc, "flops", json_real(flops));
            json_object_set_new(doc, "tflops", jreal(tf));
            if (peak > 0) {
                json_object_set_new(doc, "frac_peak", jreal(tf / peak));
                if (tf > peak * o->slack_flops)
                    kl_strbuf_addf(&why, "%sfaster than the device ceiling: %.1f TFLOP/s, the peak is %.1f TFLOP/s",
                                   why.len ? "; " : "", tf, peak);
            }
        }
        if (why.len) *passed = false;
        json_object_set_new(doc, "ok", json_boolean(*passed));
        json_object_set_new(doc, "detail", json_string(why.len ? kl_strbuf_str(&why) : "timed"));
        kl_strbuf_release(&why);
    }
    for (unsigned l = 0; l < 2; l++) {
        if (pristine[l])
            for (unsigned i = 0; i < w->task->nargs; i++)
                if (pristine[l][i].base) w->rt.free(pristine[l][i].base);
        free(pristine[l]);
        free(times[l]);
        free(host[l]);
        if (l == 0) free(host[2]);
        argset_release(w, &sets[l]);
    }
    free(tbuf);
    return rc;
}

/* ---- hygiene: threads and interposition ---------------------------------------------------- */

/* Threads the CUDA driver and CUPTI start lazily are named by them; anything else that
 * appeared after the candidate was loaded is the candidate's. */
static int hygiene_check(worker *w, const char *when)
{
    kl_thread_set now;
    kl_error err = {0};
    if (kl_threads_list(&now, &err) != KL_OK) return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
    kl_strbuf list = KL_STRBUF_INIT;
    unsigned extra = kl_threads_new(&w->threads0, &now, true, &list);
    if (extra && w->hygiene_ok) {
        w->hygiene_ok = false;
        kl_strbuf_addf(&w->hygiene_detail, "the candidate started %u thread%s %s: %s", extra, extra == 1 ? "" : "s", when,
                       kl_strbuf_str(&list));
    }
    kl_strbuf_release(&list);
    kl_threads_free(&now);
    kl_strbuf why = KL_STRBUF_INIT;
    if (!kl_symbols_check(&w->rt, &w->syms0, &w->cand.obj, &why) && w->hygiene_ok) {
        w->hygiene_ok = false;
        kl_strbuf_addf(&w->hygiene_detail, "the candidate interposes the harness's symbols (%s): %s", when,
                       kl_strbuf_str(&why));
    }
    kl_strbuf_release(&why);
    json_t *h = json_object_get(w->result, "hygiene");
    json_object_set_new(h, "ok", json_boolean(w->hygiene_ok));
    json_object_set_new(h, "detail", json_string(w->hygiene_ok ? "no threads started, no harness symbol interposed"
                                                               : kl_strbuf_str(&w->hygiene_detail)));
    return 0;
}

/* ---- jobs ------------------------------------------------------------------------------------ */

static int device_doc(worker *w)
{
    kl_rt_device d;
    if (rtc(w, w->rt.device_info(&d), "reading the device's properties")) return -1;
    char cc[16];
    kl_snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
    json_object_set_new(w->result, "device",
                        json_pack("{s:s, s:i, s:s, s:i, s:i, s:I, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "name", d.name,
                                  "ordinal", d.ordinal, "cc", cc, "sms", d.sms, "l2_bytes", d.l2_bytes, "mem_bytes",
                                  (json_int_t)d.mem_bytes, "clock_khz", d.clock_khz, "mem_clock_khz", d.mem_clock_khz,
                                  "mem_bus_bits", d.mem_bus_bits, "driver", d.driver_version, "runtime",
                                  d.runtime_version, "smem_per_block_optin", d.smem_per_block_optin, "regs_per_sm",
                                  d.regs_per_sm));
    return 0;
}

static int parse_gpu_info_job(worker *w, double *reps)
{
    static const char *const keys[] = {"job", "runtime", "nvcc", "arch", "cache_dir", "device", "reps", NULL};
    if (check_keys(w, w->job, "gpu-info", keys)) return -1;
    *reps = 20;
    return get_number(w, w->job, "", "reps", 1, 10000, reps);
}

static int job_gpu_info(worker *w, double reps)
{
    w->stage = "ceilings";
    int timer = KL_RT_TIMER_NONE;
    if (rtc(w, w->rt.timer_init(1, &timer), "starting the timer")) return -1;
    json_object_set_new(w->result, "timer", json_string(timer == KL_RT_TIMER_CUPTI ? "cupti" : "events"));
    if (timer != KL_RT_TIMER_CUPTI) json_object_set_new(w->result, "timer_note", json_string(w->rt.error()));
    kl_rt_ceilings c;
    if (rtc(w, w->rt.ceilings_measure((unsigned)reps, &c), "measuring the ceilings")) return -1;
    json_object_set_new(w->result, "ceilings",
                        json_pack("{s:o, s:o, s:o, s:i, s:I, s:s, s:s, s:s}", "copy_gbs", jreal(c.copy_gbs), "fma_tflops",
                                  jreal(c.fma_tflops), "tensor_tflops", jreal(c.tensor_tflops), "reps", (int)c.reps,
                                  "copy_bytes", (json_int_t)c.copy_bytes, "copy",
                                  "cudaMemcpyAsync device to device, bytes read + written", "fma",
                                  "f32 FMA chains, 2 flops per FMA", "tensor",
                                  "mma.sync.m16n8k16 bf16 x bf16 + f32 (not wgmma: a floor on the tensor peak)"));
    json_object_set_new(w->result, "cublas", json_boolean(w->rt.cublas_available()));
    return 0;
}

/* Everything of a gate job that is plain JSON, checked before CUDA is touched. */
static int parse_gate_job(worker *w, gate_opts *op, gate_paths *gp)
{
    static const char *const keys[] = {"job", "runtime", "nvcc", "arch", "cache_dir", "device", "task_dir",
                                       "candidate", "baseline", "baseline_builtin", "baseline_args", "shapes",
                                       "seeds", "stages", "reference_max_flops", "ceilings", "ceiling_slack",
                                       "timer", "stream_margin_us", "tight", "poison_smem", "deadline_s",
                                       "reference_budget_s", "host_slack_ms", "sandbox", NULL};
    if (check_keys(w, w->job, "gate", keys)) return -1;
    gate_opts o;
    memset(&o, 0, sizeof o);
    memset(gp, 0, sizeof *gp);
    o.correct = o.determinism = o.integrity = o.stream = true;
    o.profile = (profile_opts){true, "bench", 20, 200, 1.5, 3, 0.01, true};
    o.reference_max_flops = -1;
    o.slack_bytes = 1.25;
    o.slack_flops = 2.0;
    o.want_cupti = true;
    o.stream_margin_us = 10;
    o.poison_smem = true;
    o.reference_budget_s = REFERENCE_BUDGET_S;
    o.host_slack_ms = HOST_SLACK_MS;

    const char *timer_s;
    if (get_string(w, w->job, "task_dir", true, &gp->task_dir) || get_string(w, w->job, "candidate", true, &gp->cand_path) ||
        get_string(w, w->job, "baseline", false, &gp->base_path) ||
        get_string(w, w->job, "baseline_builtin", false, &gp->builtin) || get_string(w, w->job, "timer", false, &timer_s))
        return -1;
    if (gp->base_path && gp->builtin)
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: give \"baseline\" or \"baseline_builtin\", not both");
    if (timer_s) {
        if (!strcmp(timer_s, "events")) o.want_cupti = false;
        else if (strcmp(timer_s, "cupti"))
            return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"timer\" is cupti or events, not \"%s\"", timer_s);
    }
    json_t *stages = json_object_get(w->job, "stages");
    if (stages && parse_stages(w, stages, &o)) return -1;
    if (get_number(w, w->job, "", "reference_max_flops", 0, 1e30, &o.reference_max_flops) ||
        get_number(w, w->job, "", "stream_margin_us", 0, 1e6, &o.stream_margin_us) ||
        get_bool(w, w->job, "", "tight", &o.tight) || get_bool(w, w->job, "", "poison_smem", &o.poison_smem) ||
        get_number(w, w->job, "", "deadline_s", 0, 1e6, &o.deadline_s) ||
        get_number(w, w->job, "", "reference_budget_s", 0, 1e6, &o.reference_budget_s) ||
        get_number(w, w->job, "", "host_slack_ms", 0, 1e6, &o.host_slack_ms))
        return -1;
    json_t *ceil = json_object_get(w->job, "ceilings");
    if (ceil) {
        static const char *const ck[] = {"copy_gbs", "fma_tflops", "tensor_tflops", NULL};
        if (!json_is_object(ceil)) return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"ceilings\" must be an object");
        if (check_keys(w, ceil, "ceilings", ck) || get_number(w, ceil, "ceilings.", "copy_gbs", 0, 1e9, &o.copy_gbs) ||
            get_number(w, ceil, "ceilings.", "fma_tflops", 0, 1e9, &o.fma_tflops) ||
            get_number(w, ceil, "ceilings.", "tensor_tflops", 0, 1e9, &o.tensor_tflops))
            return -1;
    }
    json_t *slack = json_object_get(w->job, "ceiling_slack");
    if (slack) {
        static const char *const sk[] = {"bytes", "flops", NULL};
        if (!json_is_object(slack)) return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"ceiling_slack\" must be an object");
        if (check_keys(w, slack, "ceiling_slack", sk) || get_number(w, slack, "ceiling_slack.", "bytes", 1, 100, &o.slack_bytes) ||
            get_number(w, slack, "ceiling_slack.", "flops", 1, 100, &o.slack_flops))
            return -1;
    }

    json_t *shapes = json_object_get(w->job, "shapes");
    if (!json_is_array(shapes) || json_array_size(shapes) == 0)
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"shapes\" must be a non-empty array of shape labels");
    gp->bmap = json_object_get(w->job, "baseline_args");
    if (gp->bmap && !json_is_object(gp->bmap))
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"baseline_args\" must be an object");
    gp->sandbox = json_object_get(w->job, "sandbox");
    if (gp->sandbox) {
        static const char *const sk[] = {"scratch", "read", "write", "require", NULL};
        if (!json_is_object(gp->sandbox)) return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"sandbox\" must be an object");
        if (check_keys(w, gp->sandbox, "sandbox", sk)) return -1;
        const char *scratch;
        if (get_string(w, gp->sandbox, "scratch", true, &scratch)) return -1;
        const char *lists[] = {"read", "write"};
        for (int k = 0; k < 2; k++) {
            json_t *a = json_object_get(gp->sandbox, lists[k]), *v;
            size_t i;
            if (a && !json_is_array(a))
                return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: sandbox.%s must be an array of paths", lists[k]);
            json_array_foreach(a, i, v) if (!json_is_string(v))
                return fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: sandbox.%s[%zu] must be a path", lists[k], i);
        }
    }
    *op = o;
    return 0;
}

/* The reference's speed on this host, measured at the largest referenced job shape of at most
 * REFERENCE_PROBE_FLOPS (its reference is needed anyway: it is computed here, before the pool
 * starts, and kept); every shape whose reference would then take longer than the budget is
 * checked against the baseline instead. Recorded in the result's "reference_speed". */
static int reference_budget(worker *w, const gate_opts *o)
{
    const char *cost = w->task->cost_flops;
    if (!cost || !(o->reference_budget_s > 0) || w->ref_load_st != KL_OK) return 0;
    const kl_shape *probe = NULL;
    double probe_flops = -1;
    for (unsigned k = 0; k < w->nshapes; k++) {
        double f = shape_cost(w, w->shapes[k].shape, cost);
        if (w->shapes[k].reference && f <= REFERENCE_PROBE_FLOPS && f > probe_flops) {
            probe = w->shapes[k].shape;
            probe_flops = f;
        }
    }
    if (!probe || probe_flops < REFERENCE_PROBE_MIN_FLOPS) return 0; /* too small to time */
    input_entry *e;
    if (inputs_get(w, probe, w->seeds[0], &e)) return -1; /* no pool yet: filled here */
    pthread_mutex_lock(&w->cache_mu);
    bool run = !e->ref_queued;
    e->want_ref = e->ref_queued = true;
    pthread_mutex_unlock(&w->cache_mu);
    double t0 = kl_now();
    if (run) reference_task(e);
    double dt = kl_now() - t0;
    if (e->ref_st != KL_OK) return 0; /* reported by the stage that needs it */
    if (dt < 1e-4) dt = 1e-4;          /* a clock's grain: a fast reference is not infinitely fast */
    double speed = probe_flops / dt, limit = speed * o->reference_budget_s;
    json_t *moved = json_array();
    for (unsigned k = 0; k < w->nshapes; k++) {
        double f = shape_cost(w, w->shapes[k].shape, cost);
        if (!w->shapes[k].reference || !(f > limit)) continue;
        w->shapes[k].reference = false;
        json_array_append_new(moved, json_pack("{s:s, s:f, s:f}", "shape", w->shapes[k].shape->label, "flops", f,
                                               "predicted_s", f / speed));
    }
    json_object_set_new(w->result, "reference_speed",
                        json_pack("{s:s, s:f, s:f, s:f, s:f, s:f, s:o}", "shape", probe->label, "flops", probe_flops,
                                  "seconds", dt, "flops_per_s", speed, "budget_s", o->reference_budget_s,
                                  "limit_flops", limit, "against_baseline", moved));
    return 0;
}

/* Before CUDA starts: the task, the shapes and seeds, the reference object, the pool, and
 * every (shape, seed) the correct stage will use queued for filling and for the reference,
 * so that the host work overlaps the CUDA context's start and the GPU stages. A task that
 * does not load is left to job_gate to report (after the device was looked for). */
static void apply_opts(worker *w, const gate_opts *o)
{
    w->tight = o->tight;
    w->poison_smem = o->poison_smem && !o->tight; /* the sanitizer runs check shared memory themselves */
    w->smem_byte = 0xFF;
    w->deadline = o->deadline_s > 0 ? w->tm.start + o->deadline_s : 0;
}

static int gate_prepare(worker *w, const gate_opts *o, const gate_paths *gp)
{
    double t0 = kl_now();
    kl_error err = {0};
    apply_opts(w, o);
    if (kl_task_load(gp->task_dir, &w->task, &err) != KL_OK) {
        w->task = NULL;
        return 0;
    }
    w->stage = "job";
    if (parse_shapes(w, json_object_get(w->job, "shapes")) || parse_seeds(w, json_object_get(w->job, "seeds"))) return -1;
    apply_reference_limit(w, o);
    w->stage = "init";
    bool any_ref = false;
    for (unsigned k = 0; k < w->nshapes; k++) any_ref |= w->shapes[k].reference;
    if (any_ref && o->correct) reference_load(w);
    if (any_ref && o->correct && reference_budget(w, o)) return -1;
    if (kl_pool_start(0, &w->pool, &err) != KL_OK) {
        kl_log(KL_LOG_WARN, "%s; filling inputs on one thread", err.message);
        w->pool = NULL;
    }
    w->task_prepared = true;
    if (o->correct)
        for (unsigned k = 0; k < w->nshapes; k++)
            for (unsigned si = 0; si < shape_seeds(w, &w->shapes[k]); si++) {
                input_entry *e;
                if (inputs_schedule(w, w->shapes[k].shape, w->seeds[si], w->shapes[k].reference, &e)) return -1;
            }
    w->tm.inputs_start = kl_now() - t0;
    return 0;
}

/* On a pool thread started before the sandbox: it joins the Landlock domain before its next
 * task (seccomp already covers it: the filter went to every thread). */
static void pool_join_sandbox(void *arg)
{
    worker *w = arg;
    kl_error err = {0};
    if (kl_sandbox_join(&w->sandbox, &err) != KL_OK) kl_log(KL_LOG_WARN, "%s", err.message);
}

static const char **string_list(json_t *a)
{
    size_t n = json_array_size(a);
    const char **out = calloc(n + 1, sizeof *out);
    for (size_t i = 0; out && i < n; i++) out[i] = json_string_value(json_array_get(a, i));
    return out;
}

/* The sandbox, before the first untrusted object (baseline or candidate) is loaded: the harness
 * (CUDA, CUPTI, cuBLAS, the reference, the pool) is up by then and needs nothing it forbids.
 * What is in force goes to the result's "sandbox". Not in force where the kernel does not offer
 * it, said so (a harness failure when the job requires it). */
static bool process_sandboxed;

bool kl_worker_sandboxed(void) { return process_sandboxed; }

static int sandbox_enter(worker *w, json_t *spec)
{
    json_t *doc = json_object();
    json_object_set_new(w->result, "sandbox", doc);
    if (!spec) {
        json_object_set_new(doc, "applied", json_false());
        json_object_set_new(doc, "detail", json_string("not asked for"));
        return 0;
    }
    const char **rd = string_list(json_object_get(spec, "read"));
    const char **wr = string_list(json_object_get(spec, "write"));
    kl_sandbox_policy pol = {json_string_value(json_object_get(spec, "scratch")), rd, wr, true};
    kl_error err = {0};
    kl_status st = rd && wr ? kl_sandbox_apply(&pol, &w->sandbox, &err) : kl_error_set(&err, KL_ERR_NOMEM, "out of memory");
    free(rd);
    free(wr);
    bool require = json_is_true(json_object_get(spec, "require"));
    w->sandboxed = st == KL_OK && (w->sandbox.landlock || w->sandbox.seccomp);
    process_sandboxed |= st == KL_OK;
    json_object_set_new(doc, "applied", json_boolean(w->sandboxed));
    json_object_set_new(doc, "landlock", json_boolean(w->sandbox.landlock));
    json_object_set_new(doc, "landlock_abi", json_integer(w->sandbox.landlock_abi));
    json_object_set_new(doc, "seccomp", json_boolean(w->sandbox.seccomp));
    json_object_set_new(doc, "rlimits", json_boolean(w->sandbox.rlimits));
    json_object_set_new(doc, "detail", json_string(st == KL_OK ? w->sandbox.detail : err.message));
    if (st == KL_OK && w->sandbox.landlock && w->pool) kl_pool_set_hook(w->pool, pool_join_sandbox, w);
    if (require && (st != KL_OK || !w->sandbox.landlock || !w->sandbox.seccomp))
        return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "the sandbox is required and not in force: %s",
                    st == KL_OK ? w->sandbox.detail : err.message);
    if (st != KL_OK) kl_log(KL_LOG_WARN, "the sandbox could not be applied: %s", err.message);
    return 0;
}

static int job_gate(worker *w, const gate_opts *op, const gate_paths *gp)
{
    gate_opts o = *op;
    const char *task_dir = gp->task_dir, *cand_path = gp->cand_path, *base_path = gp->base_path, *builtin = gp->builtin;
    json_t *bmap = gp->bmap;
    w->stage = "task";
    kl_error err = {0};
    if (!w->task_prepared) {
        apply_opts(w, &o);
        if (kl_task_load(task_dir, &w->task, &err) != KL_OK) return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        if (parse_shapes(w, json_object_get(w->job, "shapes")) || parse_seeds(w, json_object_get(w->job, "seeds")))
            return -1;
        apply_reference_limit(w, &o);
    }
    w->tol.rel_l2 = w->task->rel_l2;
    w->tol.max_abs = w->task->max_abs;
    w->tol.exact = w->task->exact;

    /* the harness first: timer (CUPTI's thread), stream, cuBLAS (only for a builtin baseline);
     * then the snapshot. The pool's threads were started before it (prepare), so they are
     * the harness's too. */
    w->stage = "init";
    double t = kl_now();
    if (rtc(w, w->rt.timer_init(o.want_cupti, &w->timer), "starting the timer")) return -1;
    if (o.want_cupti && w->timer != KL_RT_TIMER_CUPTI)
        json_object_set_new(w->result, "timer_note", json_string(w->rt.error()));
    w->tm.cupti_init = kl_now() - t;
    t = kl_now();
    if (rtc(w, w->rt.stream_create(&w->stream, 0), "creating the launch stream")) return -1;
    w->tm.stream_create = kl_now() - t;
    w->cand.role = "candidate";
    w->base.role = "baseline";
    t = kl_now();
    if (builtin && setup_builtin(w, &w->base, builtin, bmap)) return -1;
    w->tm.cublas_init = kl_now() - t;
    if (sandbox_enter(w, gp->sandbox)) return -1;
    if (base_path) {
        w->stage = "load";
        t = kl_now();
        if (kl_shim_object_load(base_path, &w->base.obj, &err) != KL_OK) {
            kl_error_prefix(&err, "baseline");
            return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        }
        w->base.present = true;
        w->tm.baseline_load = kl_now() - t;
    }
    t = kl_now();
    if (kl_threads_list(&w->threads0, &err) != KL_OK) return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
    kl_symbols_snapshot(&w->rt, &w->syms0);
    w->tm.snapshot = kl_now() - t;

    w->stage = "load";
    json_object_set_new(w->result, "hygiene", json_pack("{s:b, s:s}", "ok", 1, "detail", "pending"));
    w->hygiene_ok = true;
    t = kl_now();
    if (kl_shim_object_load(cand_path, &w->cand.obj, &err) != KL_OK) {
        json_object_set_new(w->result, "load", json_pack("{s:b, s:s}", "ok", 0, "detail", err.message));
        json_object_del(w->result, "hygiene");
        return 0;
    }
    w->cand.present = true;
    w->tm.candidate_load = kl_now() - t;
    json_object_set_new(w->result, "load", json_pack("{s:b, s:s}", "ok", 1, "detail", "the shim answered klineage-shim-1"));
    if (hygiene_check(w, "when loaded")) return -1;
    if (!w->hygiene_ok) return 0;

    w->integrity_on = o.integrity;
    w->integrity_ok = true;
    bool ok = true;
    if (o.correct) {
        t = kl_now();
        int rc = stage_correct(w, &o, &ok);
        w->tm.correct = kl_now() - t;
        if (rc) return -1;
        if (hygiene_check(w, "while running")) return -1;
        if (!w->hygiene_ok || !ok) goto integrity;
    }
    if (o.determinism) {
        t = kl_now();
        int rc = stage_determinism(w, &o, &ok);
        w->tm.determinism = kl_now() - t;
        if (rc) return -1;
        if (!ok) goto integrity;
    }
integrity:
    if (o.integrity) {
        json_object_set_new(w->result, "integrity",
                            json_pack("{s:b, s:s, s:i}", "ok", w->integrity_ok, "detail",
                                      w->integrity_ok ? "inputs unchanged and guard zones intact after every launch"
                                                      : kl_strbuf_str(&w->integrity_detail),
                                      "launches", (int)w->integrity_launches));
        if (!w->integrity_ok) ok = false;
    }
    if (!ok || !w->hygiene_ok) return hygiene_check(w, "while running");
    if (o.stream) {
        const kl_shape *a, *b, *largest;
        pick_shapes(w, &a, &b, &largest);
        const kl_shape *sh = o.profile.on && kl_task_shape(w->task, o.profile.shape) ? kl_task_shape(w->task, o.profile.shape)
                                                                                      : largest;
        t = kl_now();
        int rc = stage_stream(w, &o, sh, &ok);
        w->tm.stream = kl_now() - t;
        if (rc) return -1;
        if (!ok) return hygiene_check(w, "while running");
    }
    if (o.profile.on) {
        t = kl_now();
        int rc = stage_profile(w, &o, &ok);
        w->tm.profile = kl_now() - t;
        if (rc) return -1;
    }
    w->stage = "finish";
    t = kl_now();
    if (rtc(w, w->rt.device_sync(), "the final device synchronize")) return -1;
    if (rtc(w, w->rt.check(), "the final error check")) return -1;
    int rc = hygiene_check(w, "while running");
    w->tm.finish = kl_now() - t;
    return rc;
}

static int setup_cache_dir(worker *w)
{
    const char *cache;
    if (get_string(w, w->job, "cache_dir", false, &cache)) return -1;
    w->cache_dir = cache ? kl_strdup(cache) : kl_cache_dir();
    if (!w->cache_dir) return fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    return 0;
}

static int setup_runtime(worker *w)
{
    const char *rt_path, *nvcc, *arch;
    if (get_string(w, w->job, "runtime", false, &rt_path) || get_string(w, w->job, "nvcc", false, &nvcc) ||
        get_string(w, w->job, "arch", false, &arch))
        return -1;
    double dev = 0;
    if (get_number(w, w->job, "", "device", 0, 1024, &dev)) return -1;
    char *built = NULL;
    kl_error err = {0};
    if (!rt_path && (!nvcc || !arch))
        return fail(w, KL_WORKER_EXIT_JOB, NULL, false,
                    "job: give \"runtime\" (the device runtime's object), or \"nvcc\" and \"arch\" to build it");
    w->stage = "init";
    double t = kl_now();
    if (!rt_path) {
        if (kl_runtime_build(nvcc, arch, w->cache_dir, &built, &err) != KL_OK) return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        rt_path = built;
    }
    kl_status st = kl_rt_api_load(rt_path, &w->rt, &err);
    free(built);
    w->tm.runtime_load = kl_now() - t;
    if (st != KL_OK) return kfail(w, KL_WORKER_EXIT_HARNESS, &err);
    t = kl_now();
    int rc = w->rt.init((int)dev);
    w->tm.cuda_init = kl_now() - t;
    if (rc == KL_RT_ERR_NO_DEVICE) return fail(w, KL_WORKER_EXIT_NO_GPU, w->rt.error_name(), false, "no CUDA device: %s", w->rt.error());
    if (rtc(w, rc, "initialising CUDA")) return -1;
    w->rt_ready = true;
    t = kl_now();
    rc = device_doc(w);
    w->tm.device_info = kl_now() - t;
    return rc;
}

/* The result's "timings": where the worker's time went, in seconds (docs/gate-worker.md). */
static json_t *timings_doc(worker *w)
{
    const worker_times *t = &w->tm;
    json_t *d = json_object();
#define TSET(key, v) json_object_set_new(d, key, json_real(round((v) * 1e6) / 1e6))
    TSET("total", kl_now() - t->start);
    TSET("parse", t->parse);
    TSET("inputs_start", t->inputs_start);
    TSET("runtime_load", t->runtime_load);
    TSET("cuda_init", t->cuda_init);
    TSET("device_info", t->device_info);
    TSET("cupti_init", t->cupti_init);
    TSET("stream_create", t->stream_create);
    TSET("cublas_init", t->cublas_init);
    TSET("baseline_load", t->baseline_load);
    TSET("snapshot", t->snapshot);
    TSET("candidate_load", t->candidate_load);
    TSET("correct", t->correct);
    TSET("determinism", t->determinism);
    TSET("stream", t->stream);
    TSET("profile", t->profile);
    TSET("finish", t->finish);
    /* inside the stages above */
    TSET("alloc", t->alloc);
    TSET("release", t->release);
    TSET("upload", t->upload);
    TSET("launch", t->launch);
    TSET("readback", t->readback);
    TSET("integrity", t->integrity);
    TSET("compare", t->compare);
    TSET("wait_inputs", t->wait_inputs);
    TSET("wait_reference", t->wait_reference);
    TSET("device_inputs", t->device_inputs);
    json_object_set_new(d, "buffers_reused", json_integer(t->buffers_reused));
    json_object_set_new(d, "buffers_allocated", json_integer(t->buffers_allocated));
    /* on the pool, summed over its threads */
    pthread_mutex_lock(&w->cache_mu);
    double ref_cpu = t->reference_cpu, ref_load = t->reference_load;
    unsigned fills = t->fills, refs = t->references;
    pthread_mutex_unlock(&w->cache_mu);
    double busy = kl_pool_busy_seconds(w->pool);
    TSET("reference_load", ref_load);
    TSET("references_cpu", ref_cpu);
    json_object_set_new(d, "references", json_integer(refs));
    TSET("fills_cpu", busy > ref_cpu ? busy - ref_cpu : 0);
    json_object_set_new(d, "fills", json_integer(fills));
    json_object_set_new(d, "pool_threads", json_integer(kl_pool_threads(w->pool)));
    /* the profile stage */
    TSET("profile_setup", t->profile_setup);
    TSET("profile_warmup", t->profile_warmup);
    TSET("profile_timed", t->profile_timed);
    json_object_set_new(d, "profile_reps", json_integer(t->profile_reps));
    json_object_set_new(d, "profile_batches", json_integer(t->profile_batches));
    if (t->profile_retries) json_object_set_new(d, "profile_retries", json_integer(t->profile_retries));
    json_object_set_new(d, "profile_stopped", json_string(t->profile_stopped ? t->profile_stopped : ""));
    json_object_set_new(d, "profile_median_rse", jreal(t->profile_rse));
#undef TSET
    return d;
}

int kl_worker_run(const char *job, size_t len, char **result)
{
    worker W;
    worker *w = &W;
    memset(w, 0, sizeof *w);
    w->tm.start = kl_now();
    pthread_mutex_init(&w->cache_mu, NULL);
    pthread_cond_init(&w->cache_cv, NULL);
    pthread_mutex_init(&w->ref_mu, NULL);
    w->ref_load_st = KL_OK;
    kl_strbuf_init(&w->integrity_detail, 1024);
    kl_strbuf_init(&w->hygiene_detail, 1024);
    w->result = json_object();
    w->sandbox.ruleset_fd = -1;
    w->exit_code = KL_WORKER_EXIT_OK;
    w->stage = "job";
    json_error_t jerr;
    w->job = json_loadb(job, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc = 0;
    if (!w->job) {
        rc = fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
    } else if (!json_is_object(w->job)) {
        rc = fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: expected a JSON object");
    } else {
        const char *kind = NULL;
        rc = get_string(w, w->job, "job", true, &kind);
        if (!rc && strcmp(kind, "gate") && strcmp(kind, "gpu-info"))
            rc = fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"job\" is gate or gpu-info, not \"%s\"", kind);
        bool gate = !rc && !strcmp(kind, "gate");
        gate_opts o;
        gate_paths gp;
        double reps = 0;
        if (!rc) {
            json_object_set_new(w->result, "job", json_string(kind));
            rc = gate ? parse_gate_job(w, &o, &gp) : parse_gpu_info_job(w, &reps);
        }
        if (!rc) rc = setup_cache_dir(w);
        w->tm.parse = kl_now() - w->tm.start;
        if (!rc && gate) rc = gate_prepare(w, &o, &gp);
        if (!rc) rc = setup_runtime(w);
        if (!rc) rc = gate ? job_gate(w, &o, &gp) : job_gpu_info(w, reps);
    }
    (void)rc;
    json_object_set_new(w->result, "timings", timings_doc(w));
    json_object_set_new(w->result, "error", w->error ? w->error : json_null());
    w->error = NULL;
    *result = json_dumps(w->result, JSON_INDENT(1) | JSON_REAL_PRECISION(9));

    /* release: the pool first (it may still be filling), then device memory (a sticky
     * context refuses, which is fine) */
    pthread_mutex_lock(&w->cache_mu);
    w->cancel = true; /* references still queued are not computed */
    pthread_mutex_unlock(&w->cache_mu);
    if (w->abandon) {
        /* a reference is still running past the deadline: the result is out; the process ends
         * (main exits at once) without waiting for it or freeing what it uses */
        json_decref(w->result);
        json_decref(w->job);
        return w->exit_code;
    }
    kl_pool_stop(w->pool);
    w->pool = NULL;
    if (w->task) inputs_free(w);
    buffers_free(w);
    if (w->stream && w->rt_ready && w->exit_code != KL_WORKER_EXIT_CUDA) w->rt.stream_destroy(w->stream);
    kl_shim_object_unload(&w->cand.obj);
    kl_shim_object_unload(&w->base.obj);
    kl_reference_free(w->ref);
    kl_task_free(w->task);
    if (w->rt_ready && w->exit_code != KL_WORKER_EXIT_CUDA) w->rt.fini();
    kl_rt_api_unload(&w->rt);
    kl_threads_free(&w->threads0);
    free(w->shapes);
    free(w->seeds);
    free(w->cache_dir);
    kl_strbuf_release(&w->integrity_detail);
    kl_strbuf_release(&w->hygiene_detail);
    kl_sandbox_release(&w->sandbox);
    pthread_mutex_destroy(&w->ref_mu);
    pthread_cond_destroy(&w->cache_cv);
    pthread_mutex_destroy(&w->cache_mu);
    json_decref(w->job);
    json_decref(w->result);
    if (!*result) return KL_WORKER_EXIT_HARNESS;
    return w->exit_code;
}
