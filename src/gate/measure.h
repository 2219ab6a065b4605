/*
 * The gate's measurements, free of CUDA: comparison of a kernel's outputs against the
 * float64 reference (compare.c) and timing statistics (stats.c). Used by the worker
 * (worker.c) and by whoever judges its results; pure functions over host buffers.
 */
#ifndef KL_GATE_MEASURE_H
#define KL_GATE_MEASURE_H

#include <stdbool.h>
#include <stdint.h>

#include "klineage/task.h"

/* ---- comparison ------------------------------------------------------------------------ */

/* A tolerance, as a task gives it. */
typedef struct kl_tolerance {
    double rel_l2;   /* bound on ||got - ref||_2 / ||ref||_2 (inclusive); ignored when exact */
    double max_abs;  /* bound on max |got - ref| (inclusive); < 0: no bound */
    bool exact;      /* every element must equal the reference exactly */
} kl_tolerance;

/* What one output buffer looked like against its reference. */
typedef struct kl_compare_result {
    int64_t count;       /* elements compared */
    double rel_l2;       /* ||d||_2 / ||ref||_2 over the elements where both are finite;
                            ||d||_2 itself when the reference is all zeros */
    double max_abs;      /* max |got - ref| over the same elements */
    int64_t first_bad;   /* index of the first element that fails, -1 if none (see below) */
    int64_t nan;         /* NaN where the reference is not NaN (poison excluded) */
    int64_t inf;         /* an infinity the reference does not have (poison excluded) */
    int64_t unwritten;   /* still holding the poison pattern, and not equal to the reference */
    int64_t mismatched;  /* finite but wrong: exact tasks, past max_abs, finite vs non-finite ref */
    bool ok;             /* passes the tolerance, with no NaN/Inf/unwritten/mismatched element */
    char detail[256];    /* one line: why it failed, or "within tolerance" */
} kl_compare_result;

/*
 * Compare `count` elements of dtype at `got` (as the kernel wrote them) against `ref`
 * (float64). `poison` is one element's bytes as the output was poisoned before the
 * launch, or NULL. An element is bad when it is unwritten, NaN/Inf where the reference is
 * finite (or of the other sign), finite where the reference is not, different at all
 * (exact), or farther than max_abs. When the only failure is rel_l2, first_bad is the
 * first element with |d| > rel_l2_tol * rms(ref), and one such element always exists.
 * NaN in both, or the same infinity in both, agrees. Never fails on values; KL_ERR_INVALID
 * for a dtype that is not a tensor type or a negative count.
 */
kl_status kl_compare(kl_dtype dtype, const void *got, const double *ref, int64_t count, const kl_tolerance *tol,
                     const void *poison, kl_compare_result *out, kl_error *err);

/* As kl_compare, with the reference in dtype as well (another kernel's output). */
kl_status kl_compare_typed(kl_dtype dtype, const void *got, const void *ref, int64_t count, const kl_tolerance *tol,
                           kl_compare_result *out, kl_error *err);

/* Slices of work run at once: run(ctx, n, fn, arg) calls fn(arg, k) for every k < n, on any
 * threads, and returns when all have returned. */
typedef struct kl_parallel {
    void (*run)(void *ctx, unsigned n, void (*fn)(void *arg, unsigned k), void *arg);
    void *ctx;
    unsigned slices;
} kl_parallel;

/* Below this many elements a comparison runs on the calling thread. */
#define KL_COMPARE_PARALLEL_MIN ((int64_t)1 << 18)

/* kl_compare (ref, float64) or kl_compare_typed (ref NULL, ref_typed in dtype), in par->slices
 * slices through par (NULL: on this thread). The same verdict and counts either way (rel_l2
 * may differ in its last bits: the partial sums are added in another grouping). */
kl_status kl_compare_par(kl_dtype dtype, const void *got, const double *ref, const void *ref_typed, int64_t count,
                         const kl_tolerance *tol, const void *poison, const kl_parallel *par, kl_compare_result *out,
                         kl_error *err);

/* Bitwise comparison of two buffers of count elements of dtype: number of elements that
 * differ and the first index (-1 when identical). */
int64_t kl_compare_bits(kl_dtype dtype, const void *a, const void *b, int64_t count, int64_t *first_diff);

/* Element i of a buffer of dtype as a double (f16/bf16 decoded exactly). 0 for NONE. */
double kl_element_double(kl_dtype dtype, const void *buf, int64_t i);

/* The poison byte of pass 0 (0xFF: NaN for every float type) and pass 1 (a large finite
 * value for float types, a sentinel for integers); two passes with different poisons mean
 * a kernel that writes nothing fails whatever the reference holds. */
unsigned char kl_poison_byte(kl_dtype dtype, int pass);

/* ---- timing statistics --------------------------------------------------------------- */

typedef struct kl_stats {
    unsigned n;
    double median, q1, q3, iqr;   /* quartiles by linear interpolation (R type 7) */
    double min, max, mean;
} kl_stats;

/* Statistics of x[0..n). KL_ERR_INVALID when n is 0 or a value is not finite;
 * KL_ERR_NOMEM when the sorted copy cannot be allocated. */
kl_status kl_stats_compute(const double *x, unsigned n, kl_stats *out, kl_error *err);

/* The p-quantile (0 <= p <= 1) of sorted[0..n), R type 7; n >= 1. */
double kl_quantile_sorted(const double *sorted, unsigned n, double p);

/*
 * Whether the median of x[0..n) has settled: n >= min_n and the distribution-free 95%
 * confidence interval of the median (order statistics of ranks n/2 -+ 0.98 sqrt(n)) is
 * no wider than rel_tol * median on either side. False on allocation failure.
 */
bool kl_stats_settled(const double *x, unsigned n, unsigned min_n, double rel_tol);

/*
 * The median's estimated standard error relative to the median: 1.2533 * sigma / sqrt(n) /
 * median, with sigma estimated robustly as IQR / 1.349 (exact for a normal distribution;
 * outliers past the quartiles do not inflate it). INFINITY when n < 2 or the median is not
 * positive; 0 when the middle half of the samples are equal.
 */
double kl_stats_median_rse(const kl_stats *st);

/* The profile loop's stopping rule (docs/gate-worker.md, profile). */
typedef enum kl_profile_stop {
    KL_PROFILE_GO_ON = 0,
    KL_PROFILE_SETTLED,      /* n >= min_reps and every series' median_rse <= settle_rel */
    KL_PROFILE_MAX_REPS,     /* n >= max_reps */
    KL_PROFILE_MAX_SECONDS   /* elapsed >= max_seconds and n >= KL_PROFILE_FLOOR_REPS */
} kl_profile_stop;

#define KL_PROFILE_FLOOR_REPS 3 /* the fewest repetitions a time limit may leave */

typedef struct kl_profile_rule {
    unsigned min_reps, max_reps;
    double max_seconds, settle_rel;
} kl_profile_rule;

/*
 * Whether to stop after n repetitions of each of nseries series (series[k][0..n)), elapsed
 * seconds into the timed loop. Settled is checked first, then max_reps, then max_seconds.
 * *worst_rse (may be NULL) receives the largest median_rse of the series (INFINITY when
 * one cannot be computed). Pure: no clock, no allocation beyond a sorted copy.
 */
kl_profile_stop kl_profile_should_stop(const kl_profile_rule *rule, const double *const *series, unsigned nseries,
                                       unsigned n, double elapsed, double *worst_rse);
const char *kl_profile_stop_name(kl_profile_stop s); /* "settled", "max_reps", "max_seconds", "" */

#endif
