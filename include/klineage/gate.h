/*
 * The verification gate: every candidate kernel is judged the same way — compiled with
 * nvcc through a typed shim, run in a child worker on fresh random inputs at every check
 * shape against the float64 reference, checked for determinism, integrity and the stream
 * contract, timed against a baseline in the same process, optionally run under
 * compute-sanitizer — and the result is a verdict (docs/gate.md, docs/verdict-format.md).
 *
 * Verdicts are cached in the store (kind "verdict") under a content hash of
 * (candidate, baseline, task.json + reference.c, shapes and stages, device, toolchain).
 * Measure modes: live runs on this machine's GPU; record is live (the caller exports the
 * store to the archive afterwards); replay serves recorded verdicts without a GPU and
 * never invents one (a miss is an "unmeasured" verdict).
 */
#ifndef KLINEAGE_GATE_H
#define KLINEAGE_GATE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include "klineage/klineage.h"
#include "klineage/store.h"
#include "klineage/task.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A float64 reference predicted to take longer than this many seconds at a shape (its cost.flops
 * at the speed measured on the host at a small shape) is not run there: the baseline's outputs
 * stand in, at twice the tolerance (docs/gate.md, "correct"). `task check` warns of such shapes. */
#define KL_REFERENCE_BUDGET_S 20.0

typedef enum kl_gate_mode { KL_GATE_LIVE = 0, KL_GATE_REPLAY = 1, KL_GATE_RECORD = 2 } kl_gate_mode;

/* Where judgements run (docs/cluster.md). Local: this machine, one worker process at a time per
 * GPU of `gpus`; Slurm: job arrays on a cluster's GPU nodes, results through a spool folder on
 * the file system the nodes share. */
typedef enum kl_executor_kind { KL_EXECUTOR_LOCAL = 0, KL_EXECUTOR_SLURM = 1 } kl_executor_kind;

typedef struct kl_executor_options {
    kl_executor_kind kind;
    const char *gpus;         /* local: "all" or "0,2,…" (indices as nvidia-smi lists them); one worker
                                 slot per GPU. NULL: one slot on the default device, as without an
                                 executor. With the stand-in judge the indices name stand-in slots. */
    const char *spool;        /* slurm: a folder every node sees (NULL: $KLINEAGE_SPOOL, else
                                 ./klineage-spool); the cache of objects must be shared too */
    const char *partition, *account; /* slurm: sbatch --partition, --account (NULL: the cluster's) */
    const char *time_limit;   /* slurm: sbatch --time; NULL: derived from the gate's time limits */
    const char *gres;         /* slurm: sbatch --gres; NULL: "gpu:1" (none with the stand-in judge) */
    const char *sbatch_args;  /* slurm: more sbatch options, space separated, passed through */
    double poll_s;            /* slurm: how often the spool is looked at; <= 0: 0.5 */
    unsigned retries;         /* slurm: resubmissions of a task that ended without a result; 0: 2 */
} kl_executor_options;

typedef struct kl_gate_options {
    kl_gate_mode mode;
    kl_store *store;          /* borrowed, must outlive the gate; NULL: no verdict cache (replay needs one) */
    const char *arch;         /* "sm_90", "sm_90a"; NULL: the device's compute capability */
    const char *nvcc;         /* NULL: $KLINEAGE_NVCC, else nvcc in PATH, else /usr/local/cuda/bin/nvcc */
    const char *worker;       /* NULL: $KLINEAGE_WORKER, else klineage-worker beside the running binary */
    const char *sanitizer;    /* NULL: $KLINEAGE_COMPUTE_SANITIZER, else beside nvcc, else in PATH */
    const char *cache_dir;    /* NULL: kl_cache_dir() */
    const char *device;       /* replay: the recorded device to serve (NULL: the only one recorded) */
    int jobs;                 /* parallel compiles; <= 0: 1 */
    double compile_timeout_s; /* per nvcc run; <= 0: 300 */
    double run_timeout_s;     /* the worker's wall-clock limit per candidate; <= 0: 120 */
    double sanitize_timeout_s;/* per compute-sanitizer tool; <= 0: 600 */
    bool stand_in;            /* the CPU stand-in judge (docs/cluster.md, "The stand-in judge"): verdicts
                                 computed from the text, no GPU, no nvcc — a testing tool; its verdicts
                                 name the device "stand-in" and the store it opens is marked so that no
                                 measuring gate ever opens it */
    const kl_executor_options *executor; /* NULL: every worker runs here, one at a time */
    volatile sig_atomic_t *interrupt;    /* set (SIGINT): waiting judgements stop, Slurm jobs are cancelled */
} kl_gate_options;

/* A gate: settings, the toolchain found, the device document once known. Not thread-safe:
 * one thread judges at a time (compiles inside it run in parallel). */
typedef struct kl_gate kl_gate;

/* Open a gate. Finds nvcc lazily (replay never needs it). *out: kl_gate_close. */
kl_status kl_gate_open(const kl_gate_options *opt, kl_gate **out, kl_error *err);
void kl_gate_close(kl_gate *gate);

/* A kernel file: a name for messages and nvcc diagnostics (usually its path) and its text.
 * text NULL: the file `name` is read. Both borrowed for the call. */
typedef struct kl_gate_source {
    const char *name;
    const char *text;
} kl_gate_source;

/* ---- compile ------------------------------------------------------------------------- */

/* What ptxas reported for one kernel (entry function). */
typedef struct kl_kernel_report {
    char *name;               /* mangled, as ptxas prints it */
    char *demangled;          /* by c++filt where present; else a copy of name */
    int registers;
    int smem_static;          /* bytes of static shared memory */
    int spill_stores, spill_loads; /* bytes */
    int stack;                /* bytes of stack frame */
    int barriers;
} kl_kernel_report;

typedef struct kl_compiled {
    bool ok;
    bool cached;              /* served from the object cache, nvcc not run */
    char *object;             /* the shared object's path in the cache (NULL when !ok) */
    char *hash;               /* the content hash naming it */
    char *log;                /* nvcc's output (ptxas report, warnings, errors) */
    char *error;              /* when !ok: "FILE:LINE: error: …", the first error; else NULL */
    char *error_file;         /* the first error's file and line (NULL / 0 when unknown) */
    unsigned error_line;
    char *nvcc_version;       /* "13.0.88" */
    char *arch;               /* "sm_90" */
    char *flags;              /* the nvcc flags, space separated */
    double seconds;           /* nvcc's wall time (0 when cached) */
    kl_kernel_report *kernels;
    unsigned nkernels;
} kl_compiled;

/* Compile one kernel file of `task` with the shim. KL_OK when nvcc ran, whatever it said
 * (see ok, error); other statuses when nvcc is missing, cannot run or times out.
 * *out: kl_compiled_free. */
kl_status kl_gate_compile(kl_gate *gate, const kl_task *task, const kl_gate_source *src, kl_compiled **out,
                          kl_error *err);
/* Compile n files, up to the gate's jobs at once. outs[i] receives each (kl_compiled_free);
 * on failure every outs[i] is NULL. */
kl_status kl_gate_compile_many(kl_gate *gate, const kl_task *task, unsigned n, const kl_gate_source *srcs,
                               kl_compiled **outs, kl_error *err);
void kl_compiled_free(kl_compiled *c);
/* A compile result as JSON (docs/verdict-format.md, stage "compile"), a new string (free()). */
char *kl_compiled_to_json(const kl_compiled *c);

/* ---- verdicts ------------------------------------------------------------------------ */

typedef enum kl_stage_state { KL_STAGE_SKIPPED = 0, KL_STAGE_PASSED = 1, KL_STAGE_FAILED = 2 } kl_stage_state;

/* One stage as a line: "compile", "correct", "determinism", "integrity", "stream",
 * "profile", "sanitize". Strings owned by the verdict. */
typedef struct kl_verdict_stage {
    const char *name;
    kl_stage_state state;
    const char *summary;      /* one line: what was seen, or why it failed / was skipped */
} kl_verdict_stage;

typedef struct kl_verdict_doc kl_verdict_doc; /* private: the JSON document */

typedef struct kl_verdict {
    kl_status status;         /* KL_OK: judged; KL_ERR_UNMEASURED: replay found no record */
    bool pass;                /* every stage run passed */
    bool replayed;            /* served from a recorded verdict (replay mode) */
    bool cached;              /* served from the store in live mode */
    const char *failed_stage; /* the first failing stage; NULL when passed */
    const char *reason;       /* why it failed (or "unmeasured: …"); NULL when passed */
    const char *key;          /* the content hash (64 hex) */
    const char *device;       /* "NVIDIA H200" */
    const char *toolchain;    /* "nvcc 13.0.88 sm_90" */
    const char *candidate;    /* the candidate's name */
    const char *baseline;     /* the baseline's name, NULL when none */
    const char *date;         /* when it was measured, UTC */
    double median_ms;         /* candidate's median at the bench shape; < 0 when not profiled */
    double speedup;           /* baseline median / candidate median; < 0 when not measured */
    double gbps, tflops;      /* achieved, from the task's cost; < 0 when not known */
    const char *not_stored;   /* live: why this verdict was not kept in the store (a pass on evidence
                                 weaker than the gate's standard); NULL when it was */
    kl_verdict_stage *stages;
    unsigned nstages;
    kl_verdict_doc *doc;
} kl_verdict;

typedef struct kl_judge_options {
    bool sanitize;            /* run the compute-sanitizer stage; when the store holds the same
                                 judgement without it, its stages are reused and only the
                                 sanitizer runs */
    bool no_profile;          /* skip timing (no speedup, no roofline) */
    bool refresh;             /* live: judge again even when the store holds a verdict */
    double timeout_s;         /* the worker's wall-clock limit; <= 0: the gate's */
    const char *baseline_builtin; /* a vendor kernel built into the gate ("cublas-sgemm",
                                     "cublas-bf16gemm") as the baseline, instead of a file */
    bool bench_against_baseline;  /* check the bench shape against the baseline's outputs (with
                                     twice the tolerance; one seed) instead of the float64
                                     reference — for a baseline already verified there, as a
                                     walk's parent is. Part of the verdict key. Needs a baseline. */
} kl_judge_options;

/* Judge `candidate` on `task`, against `baseline` (NULL: the task's naive kernel, or none
 * when the task has none). opt may be NULL (defaults).
 * Returns KL_OK with *out the verdict, passed or rejected. In replay mode a miss returns
 * KL_ERR_UNMEASURED with err saying so and *out an "unmeasured" verdict (never invented
 * figures). Other statuses (no GPU, no nvcc, the baseline does not compile, the store
 * failed) leave *out NULL. *out: kl_verdict_free. */
kl_status kl_gate_judge(kl_gate *gate, const kl_task *task, const kl_gate_source *candidate,
                        const kl_gate_source *baseline, const kl_judge_options *opt, kl_verdict **out,
                        kl_error *err);
void kl_verdict_free(kl_verdict *v);

/* The verdict as JSON (docs/verdict-format.md), a new string (free()). pretty: indented
 * on several lines; otherwise one line. */
char *kl_verdict_json(const kl_verdict *v, bool pretty);

/* Parse a verdict document (as stored or archived). *out: kl_verdict_free. */
kl_status kl_verdict_parse(const char *json, kl_verdict **out, kl_error *err);

/* ---- the seam for the searches (the backward walk and the forward optimizer) ----------- */

/* What a search needs of one judgement. */
typedef struct kl_judgement {
    bool pass;                /* compiled, correct at every shape, every check passed */
    bool unmeasured;          /* replay had no record: the search stops, saying so */
    bool replayed;
    char stage[32];           /* first failing stage ("" when passed) */
    char reason[512];         /* why ("" when passed) */
    char key[65];             /* the verdict's content hash (64 hex + NUL) */
    double speedup;           /* time(baseline) / time(candidate) at the bench shape; < 0 unknown */
    double cand_ms, base_ms;  /* medians; < 0 unknown */
    char device[96];          /* where it was measured ("" unknown) */
    char date[32];            /* when ("" unknown) */
} kl_judgement;

/* What a judgement asks for (flags, or-ed). */
enum {
    KL_JUDGE_PROFILE = 1u << 0,        /* time it against the baseline (else correctness only) */
    KL_JUDGE_BENCH_VS_BASELINE = 1u << 1, /* check the bench shape against the baseline's outputs
                                           (a version the search already verified there), not the
                                           float64 reference: the check shapes still are */
    KL_JUDGE_SANITIZE = 1u << 2          /* also the sanitizer stages (memcheck with each tensor at
                                           its allocation's end, racecheck, initcheck, synccheck),
                                           for a version about to be admitted or returned: the
                                           default stages do not catch every race. The gate reuses
                                           the same judgement without it when stored and runs only
                                           the sanitizer (docs/gate.md) */
};

/* The judge a search calls: by default the gate (kl_gate_search_judge); tests give their own. */
typedef kl_status (*kl_judge_fn)(void *user, const kl_task *task, const char *cand_name, const char *cand_text,
                                 const char *base_name, const char *base_text, unsigned flags, kl_judgement *out,
                                 kl_error *err);

/* Optional: before a batch of candidates is judged one by one, get them ready at once (the
 * gate compiles them in parallel; later judgements find the objects cached). */
typedef kl_status (*kl_prepare_fn)(void *user, const kl_task *task, unsigned n, const char *const *names,
                                   const char *const *texts, kl_error *err);

/* The gate as a search's judge and preparer; user is the kl_gate*. A replay miss is a
 * judgement with `unmeasured` set (KL_OK), never an invented figure. */
kl_status kl_gate_search_judge(void *gate, const kl_task *task, const char *cand_name, const char *cand_text,
                               const char *base_name, const char *base_text, unsigned flags, kl_judgement *out,
                               kl_error *err);
kl_status kl_gate_search_prepare(void *gate, const kl_task *task, unsigned n, const char *const *names,
                                 const char *const *texts, kl_error *err);

/* Many judgements at once: n (candidate, baseline) pairs, judged concurrently where the gate has
 * several workers (kl_gate_workers), results in input order. */
typedef struct kl_judge_request {
    const char *cand_name, *cand_text;
    const char *base_name, *base_text;  /* base_text NULL: no baseline */
    unsigned flags;                     /* KL_JUDGE_* */
} kl_judge_request;

/* outs[i] receives request i's judgement. KL_OK when all n were judged (a replay miss is a
 * judgement with `unmeasured`, as for kl_judge_fn). Otherwise *done says how many leading
 * requests were judged (outs[0 .. *done) are valid; later ones may have been judged too and are
 * then in the verdict cache) and err says why request *done was not: exactly what a caller
 * judging one by one would have seen. done may be NULL. */
typedef kl_status (*kl_judge_many_fn)(void *user, const kl_task *task, unsigned n, const kl_judge_request *reqs,
                                      kl_judgement *outs, unsigned *done, kl_error *err);

/* The gate's: with one worker, the requests one by one through kl_gate_search_judge (the same
 * judgements, in the same order, as today); with several (--gpus, Slurm), the candidates and
 * baselines compiled at once on this host, then judged wherever a worker is free. */
kl_status kl_gate_search_judge_many(void *gate, const kl_task *task, unsigned n, const kl_judge_request *reqs,
                                    kl_judgement *outs, unsigned *done, kl_error *err);
/* Any kl_judge_fn as a kl_judge_many_fn: one by one, in order, stopping at the first error. */
kl_status kl_judge_many_sequential(kl_judge_fn judge, void *user, const kl_task *task, unsigned n,
                                   const kl_judge_request *reqs, kl_judgement *outs, unsigned *done, kl_error *err);

/* How many judgements the gate can run at once: its GPUs (local), a batch's width (Slurm), 1. */
unsigned kl_gate_workers(const kl_gate *gate);

/* Run fn(arg, i, err) for i in [0, n) concurrently, as wide as the gate's workers: each call holds
 * the gate (and anything else the callers share: store, rewriter) except while one of its worker
 * processes runs, so the calls may use the gate, the store and a rewriter freely. With one worker,
 * one call after another in order. sts[i] (and errs[i], may be NULL) receive each call's status.
 * Returns the first failing call's status (KL_OK when all passed). */
typedef kl_status (*kl_gate_task_fn)(void *arg, unsigned i, kl_error *err);
kl_status kl_gate_parallel(kl_gate *gate, unsigned n, kl_gate_task_fn fn, void *arg, kl_status *sts, kl_error *errs,
                           kl_error *err);

/* What the executor has to say once the work is done (GPUs dropped, jobs resubmitted): a new
 * string of lines (free()), or NULL when nothing. */
char *kl_gate_executor_report(kl_gate *gate);

/* ---- the device ---------------------------------------------------------------------- */

/* Whether this machine has an NVIDIA driver and device node (a cheap check, no CUDA). */
bool kl_gate_gpu_available(void);

/* The device document (kind "gpu"): properties, measured ceilings, the toolchain.
 * live/record: measure = true runs the worker's gpu-info job and stores the result;
 * measure = false serves the stored one, measuring only when none is stored.
 * replay: the recorded one (opt->device, or the only one recorded).
 * *json: new string (free()). KL_ERR_NO_GPU on a machine without a GPU (live). */
kl_status kl_gate_gpu_info(kl_gate *gate, bool measure, char **json, kl_error *err);

#ifdef __cplusplus
}
#endif
#endif
