/* The worker (worker.c, worker_stages.c): what its two files share. Private to
 * src/gate/worker*.c: the names are worker__*. worker.c holds the state, job parsing, the
 * launchers, buffers and argument sets, hygiene and the jobs; worker_inputs.c the input cache
 * (fills and references on the pool) and the slices of work on it; worker_stages.c the stages a candidate passes through: correct, determinism, the stream
 * contract and the timed profile. */
#ifndef KL_GATE_WORKER_INT_H
#define KL_GATE_WORKER_INT_H
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
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

#define GUARD_BYTES 256

/* ---- state ------------------------------------------------------------------------------- */

enum { BUILTIN_NONE = 0, BUILTIN_SGEMM = 1, BUILTIN_BF16GEMM = 2 };

typedef struct worker__launcher {
    const char *role;          /* "candidate", "baseline" */
    bool present;
    kl_shim_object obj;        /* a shim object, or */
    int builtin;               /* a vendor baseline (BUILTIN_*) */
    const char *builtin_name;
    unsigned ga, gb, gc, gm, gn, gk; /* the builtin's arguments: indexes into the task's args */
} worker__launcher;

typedef struct worker__dbuf {
    void *base;                /* cudaMalloc'd: guard | data | guard */
    void *ptr;                 /* base + shift: what the kernel gets */
    size_t bytes, shift, alloc;
} worker__dbuf;

/* One shape's arguments, on host and device. */
typedef struct worker__argset {
    const kl_shape *shape;
    size_t shift;              /* bytes of guard before each tensor (a multiple of 256) */
    int64_t *counts;
    size_t *bytes;
    void **host;               /* inputs as filled (in, inout; the input cache's, not owned); NULL for out */
    void **got;                /* outputs as read back (out, inout) */
    void **scratch;            /* inputs as read back for the integrity check */
    worker__dbuf *dev;
    int *scalars;
    void **args;               /* what kl_shim_launch receives */
    uint64_t seed;
    bool filled;
    struct input_entry *entry; /* where the inputs came from (argset_fill) */
} worker__argset;

/* The inputs of one (shape, seed), filled once per job on the pool, and the reference's
 * outputs for them (computed once, on the pool, one reference at a time). Guarded by the
 * worker's cache_mu until `filled` / `ref_done`; read-only afterwards. */
typedef struct input_entry {
    struct worker__worker *w;
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

typedef struct worker__shape_req {
    const kl_shape *shape;
    bool reference;            /* compared with the CPU reference (else the baseline stands in) */
    unsigned seeds;            /* how many of the job's seeds the correct stage runs here (0: all) */
} worker__shape_req;

typedef struct worker__worker {
    json_t *job, *result;
    kl_rt_api rt;
    bool rt_ready;
    kl_task *task;
    kl_reference *ref;
    char *cache_dir;
    worker__launcher cand, base;
    kl_rt_stream stream;
    worker__shape_req *shapes;
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
} worker__worker;

typedef struct worker__profile_opts {
    bool on;
    const char *shape;
    double min_reps, max_reps, max_seconds, warmup, settle_rel;
    bool flush_l2;
} worker__profile_opts;

typedef struct worker__gate_opts {
    bool correct, determinism, integrity, stream;
    worker__profile_opts profile;
    double reference_max_flops; /* < 0: no limit */
    double copy_gbs, fma_tflops, tensor_tflops;
    double slack_bytes, slack_flops;
    bool want_cupti;
    double stream_margin_us;
    bool tight, poison_smem;
    double deadline_s;          /* 0: none */
    double reference_budget_s;  /* a reference predicted slower than this at a shape: the baseline there; 0: no limit */
    double host_slack_ms;       /* host time in the candidate's launch beyond its device work that fails the profile */
} worker__gate_opts;

static inline json_t *worker__jreal(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* ---- worker.c ---- */

int worker__fail(worker__worker *w, int exit_code, const char *cuda, bool sticky, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int worker__rtc(worker__worker *w, int rc, const char *what);
int worker__launch(worker__worker *w, worker__launcher *L, worker__argset *set);
void worker__argset_release(worker__worker *w, worker__argset *s);
int worker__argset_init(worker__worker *w, worker__argset *s, const kl_shape *shape, size_t shift);
int worker__argset_fill(worker__worker *w, worker__argset *s, uint64_t seed);
int worker__argset_upload(worker__worker *w, worker__argset *s, int pass);
int worker__argset_read(worker__worker *w, worker__argset *s);
int worker__run_once(worker__worker *w, worker__launcher *L, worker__argset *s);
int worker__compare_outputs(worker__worker *w, worker__argset *s, worker__argset *against, int pass, json_t *outputs_json, bool *ok);
double worker__shape_cost(worker__worker *w, const kl_shape *shape, const char *expr);
int64_t worker__shape_elements(worker__worker *w, const kl_shape *shape);
unsigned worker__shape_seeds(const worker__worker *w, const worker__shape_req *req);
int worker__kfail(worker__worker *w, int exit_code, const kl_error *err);

/* ---- worker_inputs.c ---- */

void worker__inputs_free(worker__worker *w);
void worker__reference_load(worker__worker *w);
void worker__reference_task(void *arg);
int worker__inputs_schedule(worker__worker *w, const kl_shape *shape, uint64_t seed, bool want_ref, input_entry **out);
int worker__inputs_get(worker__worker *w, const kl_shape *shape, uint64_t seed, input_entry **out);
void worker__apply_reference_limit(worker__worker *w, const worker__gate_opts *o);

/* ---- worker_stages.c ---- */

int worker__stage_correct(worker__worker *w, const worker__gate_opts *o, bool *passed);
int worker__stage_determinism(worker__worker *w, const worker__gate_opts *o, bool *passed);
int worker__stage_stream(worker__worker *w, const worker__gate_opts *o, const kl_shape *shape, bool *passed);
int worker__stage_profile(worker__worker *w, const worker__gate_opts *o, bool *passed);
void worker__pick_shapes(worker__worker *w, const kl_shape **large_ref, const kl_shape **small_ref, const kl_shape **largest);

#endif
