/* Timing statistics: median, quartiles, and whether the median has settled (measure.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gate/measure.h"
#include "util/util.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double *sorted_copy(const double *x, unsigned n)
{
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) return NULL;
    memcpy(s, x, (size_t)n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    return s;
}

double kl_quantile_sorted(const double *sorted, unsigned n, double p)
{
    if (n == 1) return sorted[0];
    if (p <= 0) return sorted[0];
    if (p >= 1) return sorted[n - 1];
    double h = (double)(n - 1) * p;
    unsigned lo = (unsigned)floor(h);
    double frac = h - lo;
    if (lo + 1 >= n) return sorted[n - 1];
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

kl_status kl_stats_compute(const double *x, unsigned n, kl_stats *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    if (n == 0) return kl_error_set(err, KL_ERR_INVALID, "statistics of no samples");
    long double sum = 0;
    for (unsigned i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            return kl_error_set(err, KL_ERR_INVALID, "statistics: sample %u is not a finite number", i);
        sum += x[i];
    }
    double *s = sorted_copy(x, n);
    if (!s) return kl_error_set(err, KL_ERR_NOMEM, "statistics: out of memory for %u samples", n);
    out->n = n;
    out->min = s[0];
    out->max = s[n - 1];
    out->mean = (double)(sum / n);
    out->median = kl_quantile_sorted(s, n, 0.5);
    out->q1 = kl_quantile_sorted(s, n, 0.25);
    out->q3 = kl_quantile_sorted(s, n, 0.75);
    out->iqr = out->q3 - out->q1;
    free(s);
    return KL_OK;
}

bool kl_stats_settled(const double *x, unsigned n, unsigned min_n, double rel_tol)
{
    if (n == 0 || n < min_n) return false;
    double *s = sorted_copy(x, n);
    if (!s) return false;
    double median = kl_quantile_sorted(s, n, 0.5);
    /* Ranks (1-based) of the 95% interval of the median: n/2 -+ 1.96 sqrt(n) / 2. */
    double half = 0.98 * sqrt((double)n);
    double jr = floor((double)n / 2.0 - half), kr = ceil((double)n / 2.0 + half) + 1.0;
    unsigned lo = jr < 1 ? 0 : (unsigned)jr - 1;
    unsigned hi = kr > n ? n - 1 : (unsigned)kr - 1;
    bool ok = median > 0 && s[hi] - median <= rel_tol * median && median - s[lo] <= rel_tol * median;
    free(s);
    return ok;
}

double kl_stats_median_rse(const kl_stats *st)
{
    if (!st || st->n < 2 || !(st->median > 0)) return INFINITY;
    double sigma = st->iqr / 1.349;
    return 1.2533 * sigma / sqrt((double)st->n) / st->median;
}

kl_profile_stop kl_profile_should_stop(const kl_profile_rule *rule, const double *const *series, unsigned nseries,
                                       unsigned n, double elapsed, double *worst_rse)
{
    double worst = 0;
    if (n < 2 || nseries == 0) worst = INFINITY;
    for (unsigned k = 0; k < nseries && isfinite(worst); k++) {
        kl_stats st;
        if (kl_stats_compute(series[k], n, &st, NULL) != KL_OK) {
            worst = INFINITY;
            break;
        }
        double r = kl_stats_median_rse(&st);
        if (!(r <= worst)) worst = r;
    }
    if (worst_rse) *worst_rse = worst;
    if (n >= rule->min_reps && worst <= rule->settle_rel) return KL_PROFILE_SETTLED;
    if (n >= rule->max_reps) return KL_PROFILE_MAX_REPS;
    if (elapsed >= rule->max_seconds && n >= KL_PROFILE_FLOOR_REPS) return KL_PROFILE_MAX_SECONDS;
    return KL_PROFILE_GO_ON;
}

const char *kl_profile_stop_name(kl_profile_stop s)
{
    switch (s) {
    case KL_PROFILE_SETTLED: return "settled";
    case KL_PROFILE_MAX_REPS: return "max_reps";
    case KL_PROFILE_MAX_SECONDS: return "max_seconds";
    case KL_PROFILE_GO_ON: break;
    }
    return "";
}
