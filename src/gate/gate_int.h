/*
 * Private to src/gate, the parent side: the gate's state, the compile pieces (shim, ptxas
 * report, nvcc diagnostics, the object's symbols), the verdict document and the sanitizer
 * stage. The worker side (worker*.c, runtime.cu, runtime_build.c, compare.c, stats.c) has
 * its own header, measure.h; the two meet only through the protocol in docs/gate-worker.md
 * and kl_runtime_build below.
 */
#ifndef KL_GATE_INT_H
#define KL_GATE_INT_H

#include <jansson.h>

#include "klineage/gate.h"
#include "util/util.h"

#define KL_SHIM_ABI "klineage-shim-1"
#define KL_VERDICT_FORMAT "klineage-verdict-1"

struct kl_gate {
    kl_gate_mode mode;
    kl_store *store;          /* borrowed */
    char *arch;               /* --arch, or NULL (the device's) */
    char *nvcc;               /* resolved lazily (gate_nvcc) */
    char *nvcc_version;       /* "13.0.88" */
    char *worker;             /* resolved lazily */
    char *sanitizer;          /* option or NULL (resolved when needed) */
    char *cache_dir;
    char *device_opt;         /* replay: --device */
    int jobs;
    double compile_timeout_s, run_timeout_s, sanitize_timeout_s;
    json_t *gpu;              /* the device document once known */
    char *gpu_key;            /* its key in the store */
    char *runtime;            /* the device runtime's shared object, once built */
    int sandbox;              /* KL_SANDBOX_*: from $KLINEAGE_SANDBOX (off, on, require); on by default */
    bool sandbox_warned;      /* the worker ran outside the sandbox once, and it was said */
    bool stand_in;            /* the CPU stand-in judge (standin.c) */
    struct kl_executor *exec; /* where workers run (executor.h); NULL: here, one at a time */
};

enum { KL_SANDBOX_OFF = 0, KL_SANDBOX_ON = 1, KL_SANDBOX_REQUIRE = 2 };

/* ---- compile.c -------------------------------------------------------------------------- */

/* Find nvcc (option, $KLINEAGE_NVCC, PATH, /usr/local/cuda/bin/nvcc) and its version, once. */
kl_status kl_gate_nvcc(kl_gate *gate, kl_error *err);
/* "13.0.88" from `nvcc --version` output, new string, or NULL when absent. */
char *kl_nvcc_version_parse(const char *text);
/* The arch compiled for: --arch, else "sm_XY" from the device document's cc ("9.0"). New string. */
kl_status kl_gate_arch(kl_gate *gate, char **arch, kl_error *err);

/* The translation unit nvcc compiles for a kernel file: includes, a #line directive, the
 * candidate's text unchanged (so nvcc's diagnostics carry its own name and lines), then
 * the typed shim. New string (free()); KL_ERR_INVALID when the task's args cannot be typed. */
kl_status kl_shim_source(const kl_task *task, const char *name, const char *text, char **out, kl_error *err);
/* The C declaration the shim calls: extern "C" void launch(const float *x, …, cudaStream_t). */
char *kl_shim_launch_decl(const kl_task *task);
/* The nvcc flags for an arch, static strings except the arch one (in buf): `-arch=sm_XY`, or
 * `-gencode=arch=compute_XYa,code=sm_XYa` for an arch-specific target (nvcc 13.0's -arch=sm_90a
 * also runs a plain sm_90 pass that rejects wgmma). Returns how many. */
unsigned kl_nvcc_flags(const char *arch, char *arch_buf, size_t size, const char **flags, unsigned max);
/* Does a kernel file use inline PTX that only an arch-specific target assembles (wgmma.*,
 * setmaxnreg.*), outside comments? */
bool kl_source_arch_specific(const char *text);
/* The arch a kernel file compiles for: `arch`, or its arch-specific target (sm_90 -> sm_90a) when
 * arch is sm_90 or later and the text needs it. The verdict key does not change: it covers the
 * text and the device's arch, which decide this. New string (NULL: out of memory). */
char *kl_source_arch(const char *arch, const char *text);
/* The object's content hash: shim source, flags, nvcc version. */
void kl_compile_key(const char *shim_source, const char *const *flags, unsigned nflags, const char *nvcc_version,
                    char hex[KL_HASH_HEX]);

/* Parse a ptxas -v report into per-kernel figures (entry functions only, in order). *out
 * owned by the caller (kl_kernel_reports_free). Names are left mangled (demangled = copy). */
kl_status kl_ptxas_parse(const char *log, kl_kernel_report **out, unsigned *n, kl_error *err);
void kl_kernel_reports_free(kl_kernel_report *k, unsigned n);
/* Fill demangled names with one c++filt run, where c++filt exists. */
void kl_kernel_reports_demangle(kl_kernel_report *k, unsigned n);

/* The first error in an nvcc log: "FILE(LINE): error: MSG", "FILE:LINE:COL: error: MSG",
 * "nvcc fatal : MSG", "ptxas fatal : MSG". Returns false when none. *file, *msg new
 * strings (NULL when unknown); *line 0 when unknown. */
bool kl_nvcc_first_error(const char *log, char **file, unsigned *line, char **msg);

/* Inspect a candidate's shared object: it may export only the shim's symbols, and may not
 * import what starts threads or processes, loads code or resets the device. KL_OK when
 * clean; KL_ERR_INVALID with the reason in err otherwise; KL_ERR_IO/PARSE when unreadable. */
kl_status kl_object_check(const char *so_path, kl_error *err);

/* ---- runtime_build.c (the worker side) ------------------------------------------------------
 * Build the device runtime (runtime.cu) into cache_dir once per (runtime text, nvcc
 * version, arch); later calls find it. *so_path: new string (free()). */
kl_status kl_runtime_build(const char *nvcc, const char *arch, const char *cache_dir, char **so_path,
                           kl_error *err);

/* ---- verdict.c -------------------------------------------------------------------------- */

/* The verdict key: SHA-256 over candidate text, baseline text (NULL: none), task.json and
 * reference.c contents, the shapes judged, the stages asked for, device name, toolchain. */
typedef struct kl_verdict_key_parts {
    const char *candidate, *baseline;
    const char *task_json, *reference;
    const char *shapes;       /* "check[0],check[1],bench" */
    const char *stages;       /* "correct,determinism,integrity,stream,profile,sanitize" */
    const char *device, *toolchain;
} kl_verdict_key_parts;
void kl_verdict_key(const kl_verdict_key_parts *p, char hex[KL_HASH_HEX]);

/* Wrap a verdict document (the JSON is stolen) into a kl_verdict: headline fields and one
 * summary line per stage. */
kl_status kl_verdict_from_json(json_t *doc, kl_verdict **out, kl_error *err);
/* The document behind a verdict (borrowed). */
json_t *kl_verdict_document(const kl_verdict *v);
/* The "unmeasured" verdict of a replay miss. */
kl_status kl_verdict_unmeasured(const char *key, const char *candidate, const char *device, const char *toolchain,
                                const char *reason, kl_verdict **out, kl_error *err);
/* Compact description of a compile result as verdict JSON ({ok, cached, kernels, …}). */
json_t *kl_compiled_json(const kl_compiled *c);

/* The order stages are judged and reported in. */
extern const char *const kl_gate_stage_names[];
extern const unsigned kl_gate_stage_count;

/* ---- gate.c ------------------------------------------------------------------------------ */

/* The reason for a worker's end that wrote no usable result: "timed out after 30 s",
 * "killed by SIGSEGV", "exit 3". */
void kl_gate_child_reason(const kl_child *c, char *buf, size_t size);
/* The reason for a CUDA error the worker reported: "CUDA error: an illegal memory access was
 * encountered (sticky: the context is lost) in correct: …". New string. */
char *kl_gate_cuda_reason(const json_t *error);
/* The device document, loaded (replay: recorded; live: stored, else measured). */
kl_status kl_gate_device(kl_gate *gate, kl_error *err);
/* The verdict for a worker run that already ended (`worker`: its end and its stdout in
 * worker->out), the candidate taken as compiled: what live judging does after the run,
 * without a GPU (tests feed it synthetic ends and results). Needs gate->gpu, gpu_key and
 * nvcc_version. Errors, and no verdict, for ends that are not the candidate's doing. */
kl_status kl_gate_verdict_of_run(kl_gate *gate, const kl_task *task, const kl_gate_source *candidate,
                                 const kl_judge_options *opt, const kl_child *worker, kl_verdict **out, kl_error *err);
/* The worker's binary. */
kl_status kl_gate_worker(kl_gate *gate, kl_error *err);

/* ---- standin.c: the stand-in judge's verdict for a judgement keyed `key` (gate.c computed it
 * over the texts, "stand-in" and KL_STAND_IN_TOOLCHAIN). Stored like any verdict. */
kl_status kl_stand_in_judge(kl_gate *gate, const kl_task *task, const char *key, const char *cand_name,
                            const char *cand_text, const char *base_name, const char *base_text, const char *shapes,
                            const char *stages, const kl_judge_options *opt, kl_verdict **out, kl_error *err);

/* ---- executor.c: run a worker child (or the sanitizer around one) where the gate's executor
 * says; kl_child_run here when it has none. */
kl_status kl_gate_run_child(kl_gate *gate, kl_child *c, kl_error *err);
/* At kl_gate_open: the stand-in judge's settings and store mark, the executor. */
kl_status kl_gate_open_executor(kl_gate *gate, const kl_gate_options *opt, kl_error *err);

/* ---- sanitize.c ------------------------------------------------------------------------- */

/* Count what one compute-sanitizer tool reported in its log: errors (and, for racecheck,
 * hazards: errors plus warnings). -1 when the summary line is missing. */
long kl_sanitizer_count(const char *tool, const char *log);
/* Run the worker under memcheck, racecheck, initcheck and synccheck with `job` (the gate
 * job for the smallest check shape, no profile). *stage: {"ok", "tools": [...]}, new. */
kl_status kl_gate_sanitize(kl_gate *gate, const char *job, const char *scratch, json_t **stage, kl_error *err);

/* ---- the worker's sandbox, parent side (gate.c) ----------------------------------------------
 * A scratch folder for one worker run (its working folder and $TMPDIR, the one place it may
 * write), or NULL with the sandbox off; *scratch: new string, kl_gate_scratch_done removes it. */
kl_status kl_gate_scratch(kl_gate *gate, char **scratch, kl_error *err);
void kl_gate_scratch_done(char *scratch);
/* The job's "sandbox" object for a run in `scratch` (nothing when scratch is NULL). */
void kl_gate_job_sandbox(kl_gate *gate, json_t *job, const kl_task *task, const char *scratch, bool sanitizer);

#endif
