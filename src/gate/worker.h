/*
 * The worker side of the gate (docs/gate-worker.md): the code behind klineage-worker,
 * which reads one JSON job, runs kernels through the device runtime (runtime.h, loaded
 * with dlopen) and writes one JSON result. Private to src/gate; the parent side meets it
 * only through the protocol.
 */
#ifndef KL_GATE_WORKER_H
#define KL_GATE_WORKER_H

#include <stdbool.h>
#include <stddef.h>

#include "gate/runtime.h"
#include "klineage/task.h"
#include "util/util.h"

/* The worker's exit codes (docs/gate-worker.md). */
enum {
    KL_WORKER_EXIT_OK = 0,       /* the result is complete (stages passed or failed) */
    KL_WORKER_EXIT_JOB = 1,      /* the job was malformed */
    KL_WORKER_EXIT_CUDA = 2,     /* a CUDA error stopped the work; the result is partial */
    KL_WORKER_EXIT_NO_GPU = 3,   /* no CUDA driver or device */
    KL_WORKER_EXIT_HARNESS = 4   /* the harness failed (runtime, task, reference, memory) */
};

/*
 * Run one job (JSON text) to completion. *result receives the result document as JSON
 * text, always (also on failure), owned by the caller (free()). Returns the exit code.
 * Never prints; progress goes to kl_log.
 */
int kl_worker_run(const char *job, size_t len, char **result);
/* Whether a job of this process applied the sandbox (the process should then end with _exit:
 * exit handlers such as a leak checker's may need what the sandbox forbids). */
bool kl_worker_sandboxed(void);

/* ---- worker_sys.c: the runtime's symbols, loaded objects, and the process checks ------- */

/* The runtime's entry points, resolved by name (kl_rt_<field>). */
typedef struct kl_rt_api {
    void *handle;
    int (*abi)(void);
    int (*init)(int);
    void (*fini)(void);
    const char *(*error)(void);
    const char *(*error_name)(void);
    int (*device_info)(kl_rt_device *);
    int (*malloc)(void **, size_t);
    int (*free)(void *);
    int (*memset)(void *, int, size_t);
    int (*h2d)(void *, const void *, size_t);
    int (*d2h)(void *, const void *, size_t);
    int (*d2d)(void *, const void *, size_t);
    int (*digest)(const void *, size_t, uint64_t *);
    int (*host_alloc)(void **, size_t);
    int (*host_free)(void *);
    int (*stream_create)(kl_rt_stream *, int);
    int (*stream_destroy)(kl_rt_stream);
    int (*stream_sync)(kl_rt_stream);
    int (*stream_idle)(kl_rt_stream, int *);
    int (*device_sync)(void);
    int (*device_idle)(int, int *);
    int (*check)(void);
    int (*timer_init)(int, int *);
    int (*timer_begin)(void);
    int (*timer_end)(kl_rt_timing *);
    int (*batch_begin)(unsigned);
    int (*batch_open)(void);
    int (*batch_close)(void);
    int (*batch_end)(kl_rt_timing *, unsigned *);
    int (*mark)(void);
    uint64_t (*now_ns)(void);
    int (*l2_flush)(void);
    int (*smem_poison)(int);
    int (*ceilings_measure)(unsigned, kl_rt_ceilings *);
    int (*cublas_available)(void);
    int (*cublas_sgemm)(const void *, const void *, void *, int, int, int, kl_rt_stream);
    int (*cublas_bf16gemm)(const void *, const void *, void *, int, int, int, int, kl_rt_stream);
} kl_rt_api;

/* dlopen the runtime (RTLD_NOW | RTLD_LOCAL) and resolve every entry point; checks the
 * ABI version. On failure api is zeroed and err says which symbol or why. */
kl_status kl_rt_api_load(const char *path, kl_rt_api *api, kl_error *err);
void kl_rt_api_unload(kl_rt_api *api);

/* A kernel object built with the typed shim (docs/gate-worker.md). */
typedef int (*kl_shim_launch_fn)(void *const *args, void *stream);
typedef struct kl_shim_object {
    void *handle;
    char *path;
    kl_shim_launch_fn launch;
    const void *base;          /* its load address (dladdr of kl_shim_launch) */
} kl_shim_object;
/* Load a candidate or baseline object and check its shim ABI ("klineage-shim-1"). */
kl_status kl_shim_object_load(const char *path, kl_shim_object *obj, kl_error *err);
void kl_shim_object_unload(kl_shim_object *obj);

/* The process's threads: their ids (sorted) and names. */
typedef struct kl_thread_set {
    int *tids;
    char (*names)[17];
    unsigned n;
} kl_thread_set;
kl_status kl_threads_list(kl_thread_set *out, kl_error *err);
void kl_threads_free(kl_thread_set *s);
/* Threads in `now` not in `before`, described into sb ("4242 (spin), 4243 (?)"); with
 * skip_driver, threads named like the CUDA driver's and CUPTI's ("cuda…", "cupti…"), which
 * they start lazily, are left out. Returns how many. */
unsigned kl_threads_new(const kl_thread_set *before, const kl_thread_set *now, bool skip_driver, kl_strbuf *sb);
bool kl_thread_is_driver(const char *name);

/* Where the harness's key symbols resolve (libc's allocator and memory functions, the
 * thread and clock calls, the runtime's kl_rt_* entry points). Taken before a candidate
 * is loaded and compared after: a candidate object that defines one of them, or a
 * binding that moved, is interposing on the harness. */
typedef struct kl_symbol_snapshot {
    unsigned n;
    const char *names[64];
    const void *addr[64];      /* dlsym(RTLD_DEFAULT / the runtime) */
    const void *bound[64];     /* the worker's own binding (its GOT), libc symbols only */
} kl_symbol_snapshot;
void kl_symbols_snapshot(const kl_rt_api *api, kl_symbol_snapshot *snap);
/* Compare with a snapshot and look into `obj` (may be NULL): false with the reason in
 * sb when a symbol is defined by the object or resolves elsewhere than before. */
bool kl_symbols_check(const kl_rt_api *api, const kl_symbol_snapshot *before, const kl_shim_object *obj,
                      kl_strbuf *sb);

/* ---- pool.c: a small pool of threads for the worker's host work ------------------------------
 * Started before the hygiene snapshot (its threads are the harness's, never the candidate's)
 * and stopped at the end of the job. Tasks run in submission order on any thread. */
typedef struct kl_pool kl_pool;
/* nthreads 0: one per online CPU, at most KL_POOL_MAX_THREADS. */
#define KL_POOL_MAX_THREADS 16
kl_status kl_pool_start(unsigned nthreads, kl_pool **out, kl_error *err);
unsigned kl_pool_threads(const kl_pool *p);
/* Every thread runs fn(arg) once before the next task it takes (a thread busy with a task runs
 * it after): how threads started before the sandbox join it. */
void kl_pool_set_hook(kl_pool *p, void (*fn)(void *), void *arg);
/* Seconds spent running tasks so far, summed over the threads. */
double kl_pool_busy_seconds(kl_pool *p);
/* Queue fn(arg); KL_ERR_NOMEM when the task cannot be queued. */
kl_status kl_pool_submit(kl_pool *p, void (*fn)(void *), void *arg, kl_error *err);
/* Wait until every queued task has finished. */
void kl_pool_wait_idle(kl_pool *p);
/* Finish what is queued, join the threads, free. NULL is fine. */
void kl_pool_stop(kl_pool *p);

/* Elements per fill chunk: a tensor larger than this is filled on several threads. */
#define KL_FILL_CHUNK ((int64_t)1 << 20)
/* Fill tensor argument `arg` at shape under seed into buf (count elements) on the pool's
 * threads (or on this one when p is NULL), in chunks of KL_FILL_CHUNK elements: the same
 * bits as kl_task_fill. Waits for the chunks; the first failing chunk's error. Not from a
 * pool thread (it would wait on its own queue). */
kl_status kl_fill_parallel(kl_pool *p, const kl_task *task, const kl_shape *shape, unsigned arg, uint64_t seed, void *buf,
                           int64_t count, kl_error *err);

/* The same without waiting: queue the chunks (run here when p is NULL); done(ctx, status,
 * err) is called exactly once, on the thread that finished the last chunk, after every chunk
 * (err: the first failing chunk's). Must not be waited on from a pool thread. An error
 * returned here means nothing was queued and done is not called. */
kl_status kl_fill_submit(kl_pool *p, const kl_task *task, const kl_shape *shape, unsigned arg, uint64_t seed, void *buf,
                         int64_t count, void (*done)(void *ctx, kl_status st, const kl_error *err), void *ctx,
                         kl_error *err);

#endif
