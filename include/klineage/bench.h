/*
 * Benchmarks over a suite of tasks: the naive and expert kernels of every task gated in the
 * same run, against the vendor's kernel, with the targets the suite sets (docs/suite.md).
 * Results are data (JSON rows), rendered as a Markdown table by the caller's choice.
 */
#ifndef KLINEAGE_BENCH_H
#define KLINEAGE_BENCH_H

#include <stdbool.h>
#include "klineage/gate.h"
#include "klineage/klineage.h"
#include "klineage/optimize.h"
#include "klineage/rewrite.h"
#include "klineage/store.h"
#include "klineage/task.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*kl_bench_progress_fn)(void *user, const char *task, const char *text);

typedef struct kl_bench_options {
    const char *suite_dir;        /* the folder holding suite.json and the task folders */
    const char *const *only;      /* NULL-terminated task names to run, or NULL for all */
    kl_gate *gate;                /* borrowed */
    kl_store *store;              /* borrowed: vendor timings are read from it (kind "vendor") */
    const char *vendor_json;      /* a scripts/vendor_baselines.py output to store first, or NULL */
    kl_bench_progress_fn progress;
    void *progress_user;
} kl_bench_options;

/* Gate naive and expert of every task (expert against naive; GEMM experts also against the
 * vendor built into the gate), and put each task's row in a JSON array (*rows: new string,
 * free()). A task that fails is a row with its reason, not an error of the whole run;
 * KL_ERR_UNMEASURED only when every task was unmeasured in replay. */
kl_status kl_bench_experts(const kl_bench_options *opt, char **rows, kl_error *err);

/* The rows as a Markdown table with the device and date (new string, free()). */
char *kl_bench_markdown(const char *rows);

/* How one kernel of a task compares (docs/optimize.md, "Figures"): with the task's expert,
 * judged in the same run ({"expert": {"fraction": t(expert)/t(kernel), "verdict"}}); with
 * the vendor of the suite.json beside the task folder, in the same process when the gate
 * has it built in, else from a stored timing ({"vendor": {"name", "fraction",
 * "same_process"}}); and with the device's measured ceilings at the bench shape
 * ("gbps", "copy_fraction", "tflops", "compute_fraction"). median_ms: the kernel's median at
 * the bench shape when known (else the one measured against the expert). What cannot be
 * measured is an "error" member of its part, never a figure. *json: new string (free()). */
kl_status kl_bench_compare(kl_gate *gate, kl_store *store, const kl_task *task, const char *name, const char *text,
                           double median_ms, char **json, kl_error *err);

/* ---- the optimizer's evaluation (docs/optimize.md, "Evaluation") ------------------------- */

typedef struct kl_bench_optimize_options {
    const char *const *task_dirs;  /* the task folders evaluated */
    unsigned ntask_dirs;
    bool leave_one_out;            /* each task's own lineages out of the library, its runs out of
                                      the memory (the suite); false: the whole library (--tasks) */
    const kl_policy *policies;     /* which to evaluate (NULL/0: all three); the blind runs are
                                      made whenever memory is evaluated: they are its memory */
    unsigned npolicies;
    unsigned budget;               /* gate calls per run; 0: KL_OPTIMIZE_BUDGET */
    uint64_t seed;                 /* 0: 1 */
    bool no_compare;               /* do not judge the results against the expert and vendor */
    bool restart_older;            /* runs made by another revision of the search start again */
    unsigned ranking;              /* the skills runs' ranking (kl_optimize_options.ranking); 0: default */
    bool replay;                   /* replaying: nothing to compile ahead */
    kl_gate *gate;                 /* borrowed */
    kl_store *store;               /* borrowed */
    kl_rewriter *rewriter;         /* borrowed */
    volatile sig_atomic_t *interrupt;
    kl_bench_progress_fn progress;
    void *progress_user;
} kl_bench_optimize_options;

/* Run (or resume, or replay) every policy on every task, blind first, then memory, then
 * skills, each run an optimization stored step by step; *json (new string, free()): {budget,
 * seed, leave_one_out, summary: {skills_over_blind, skills_over_memory, memory_over_blind,
 * skills_calls_to_95, blind_calls_to_95, calls_to_95_ratio, skills_tasks_at_60pct_expert, …},
 * tasks: [{task, policies: {blind|memory|skills: {speedup, estimate, curve: [best after each
 * gate call], calls_to_95, rejected_compile, rejected_correct, rejected_other, compare, key,
 * stop_reason, gate_calls, counted} | {error}}}]}. A run that fails is an error in its cell,
 * not of the whole evaluation; KL_ERR_INTERRUPTED stops it (everything so far is stored). */
kl_status kl_bench_optimize(const kl_bench_optimize_options *opt, char **json, kl_error *err);
/* The evaluation as a Markdown table with its summary (new string, free()). */
char *kl_bench_optimize_markdown(const char *json);
/* The budget curves, one panel per task and one line per policy (best speedup so far against
 * gate calls), drawn with cairo to an SVG and a PNG file (either path may be NULL).
 * KL_ERR_UNSUPPORTED when this build has no cairo. */
kl_status kl_bench_optimize_plot(const char *json, const char *svg_path, const char *png_path, kl_error *err);

#ifdef __cplusplus
}
#endif
#endif
