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
#include "klineage/store.h"

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

#ifdef __cplusplus
}
#endif
#endif
