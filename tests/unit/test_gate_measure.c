/* src/gate/compare.c and stats.c on synthetic buffers: tolerance edges, NaN, Inf,
 * unwritten elements, exact tasks, quartiles and the settled test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gate/measure.h"
#include "util/util.h"

#define N 1000

/* A reference and a float copy of it, with the rel-L2 norm of the reference. */
static void make_ref(double *ref, float *got, int n)
{
    for (int i = 0; i < n; i++) {
        ref[i] = sin(0.1 * i) + 0.5;
        got[i] = (float)ref[i];
    }
}

static double norm2(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i] * v[i];
    return sqrt(s);
}

static void exact_copy_passes(void **state)
{
    (void)state;
    double ref[N];
    float got[N];
    make_ref(ref, got, N);
    kl_tolerance tol = {1e-6, -1, false};
    kl_compare_result r;
    kl_error err = {0};
    assert_int_equal(kl_compare(KL_DTYPE_F32, got, ref, N, &tol, NULL, &r, &err), KL_OK);
    assert_true(r.ok);
    assert_int_equal(r.first_bad, -1);
    assert_int_equal(r.count, N);
    /* float rounding only: at most half an ulp relative */
    assert_true(r.rel_l2 <= ldexp(1.0, -24));
    assert_true(r.rel_l2 > 0);
}

/* The rel-L2 bound is inclusive: an error exactly at the bound passes, just past fails,
 * and first_bad then names the element that carries the error. */
static void rel_l2_edge(void **state)
{
    (void)state;
    double ref[N], got[N];
    for (int i = 0; i < N; i++) ref[i] = got[i] = (double)(i % 7) - 3.0;
    const int at = 613;
    double delta = 0.25;
    got[at] += delta;
    double measured = delta / norm2(ref, N);
    kl_compare_result r;
    kl_tolerance tol = {measured, -1, false};
    assert_int_equal(kl_compare(KL_DTYPE_F64, got, ref, N, &tol, NULL, &r, NULL), KL_OK);
    assert_true(r.ok);
    assert_true(fabs(r.rel_l2 - measured) <= 1e-15 * measured);
    assert_true(r.max_abs == delta);

    tol.rel_l2 = nextafter(r.rel_l2, 0.0);
    assert_int_equal(kl_compare(KL_DTYPE_F64, got, ref, N, &tol, NULL, &r, NULL), KL_OK);
    assert_false(r.ok);
    assert_int_equal(r.first_bad, at);
    assert_int_equal(r.nan + r.inf + r.unwritten + r.mismatched, 0);
    assert_non_null(strstr(r.detail, "relative L2"));
}

static void max_abs_edge(void **state)
{
    (void)state;
    double ref[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[8];
    memcpy(got, ref, sizeof got);
    got[5] += 0.5;
    kl_compare_result r;
    kl_tolerance tol = {1.0, 0.5, false};
    kl_compare(KL_DTYPE_F64, got, ref, 8, &tol, NULL, &r, NULL);
    assert_true(r.ok);
    tol.max_abs = nextafter(0.5, 0.0);
    kl_compare(KL_DTYPE_F64, got, ref, 8, &tol, NULL, &r, NULL);
    assert_false(r.ok);
    assert_int_equal(r.mismatched, 1);
    assert_int_equal(r.first_bad, 5);
}

static void nan_and_inf_counted(void **state)
{
    (void)state;
    double ref[N];
    float got[N];
    make_ref(ref, got, N);
    got[10] = NAN;
    got[20] = NAN;
    got[30] = INFINITY;
    kl_compare_result r;
    kl_tolerance tol = {1.0, -1, false}; /* loose: only the element checks can fail */
    kl_compare(KL_DTYPE_F32, got, ref, N, &tol, NULL, &r, NULL);
    assert_false(r.ok);
    assert_int_equal(r.nan, 2);
    assert_int_equal(r.inf, 1);
    assert_int_equal(r.first_bad, 10);
    assert_true(isfinite(r.rel_l2)); /* non-finite elements are kept out of the norm */

    /* NaN and the same infinity in the reference agree */
    ref[10] = NAN;
    ref[20] = NAN;
    ref[30] = INFINITY;
    kl_compare(KL_DTYPE_F32, got, ref, N, &tol, NULL, &r, NULL);
    assert_true(r.ok);
    /* the other infinity does not; a finite value where the reference is infinite does not */
    got[30] = -INFINITY;
    kl_compare(KL_DTYPE_F32, got, ref, N, &tol, NULL, &r, NULL);
    assert_int_equal(r.inf, 1);
    got[30] = 1.0f;
    kl_compare(KL_DTYPE_F32, got, ref, N, &tol, NULL, &r, NULL);
    assert_int_equal(r.mismatched, 1);
    assert_int_equal(r.first_bad, 30);
}

/* An output left poisoned counts as unwritten in both passes, whatever the reference holds. */
static void unwritten_under_both_poisons(void **state)
{
    (void)state;
    kl_dtype types[] = {KL_DTYPE_F32, KL_DTYPE_F16, KL_DTYPE_BF16, KL_DTYPE_F64, KL_DTYPE_I32, KL_DTYPE_U8};
    for (unsigned t = 0; t < sizeof types / sizeof types[0]; t++) {
        kl_dtype dt = types[t];
        size_t es = dt == KL_DTYPE_F64 ? 8 : dt == KL_DTYPE_U8 ? 1 : (dt == KL_DTYPE_F16 || dt == KL_DTYPE_BF16) ? 2 : 4;
        for (int pass = 0; pass < 2; pass++) {
            unsigned char pb = kl_poison_byte(dt, pass);
            unsigned char poison[8];
            memset(poison, pb, sizeof poison);
            unsigned char *buf = malloc(es * 64);
            memset(buf, pb, es * 64);
            double ref[64];
            double pv = kl_element_double(dt, poison, 0);
            /* a reference that equals the poison value where the poison is a number */
            for (int i = 0; i < 64; i++) ref[i] = (i % 2 == 0 && !isnan(pv)) ? pv : 1.0;
            kl_compare_result r;
            kl_tolerance tol = {1e30, -1, false};
            kl_compare(dt, buf, ref, 64, &tol, poison, &r, NULL);
            assert_false(r.ok);
            assert_true(r.unwritten >= 32);
            assert_true(r.first_bad >= 0 && r.first_bad <= 1);
            if (isnan(pv)) assert_int_equal(r.unwritten, 64);
            assert_non_null(strstr(r.detail, "unwritten"));
            free(buf);
        }
        /* the two passes poison with different values, and pass 0 is NaN for floats */
        unsigned char p0[8], p1[8];
        memset(p0, kl_poison_byte(dt, 0), 8);
        memset(p1, kl_poison_byte(dt, 1), 8);
        double v0 = kl_element_double(dt, p0, 0), v1 = kl_element_double(dt, p1, 0);
        assert_false(v0 == v1);
        if (dt != KL_DTYPE_I32 && dt != KL_DTYPE_U8) {
            assert_true(isnan(v0));
            assert_true(isfinite(v1));
        }
    }
}

static void exact_tasks_need_equal_values(void **state)
{
    (void)state;
    int32_t got[100];
    double ref[100];
    for (int i = 0; i < 100; i++) got[i] = (int32_t)(ref[i] = i * 37 - 1000);
    kl_tolerance tol = {0, -1, true};
    kl_compare_result r;
    kl_compare(KL_DTYPE_I32, got, ref, 100, &tol, NULL, &r, NULL);
    assert_true(r.ok);
    got[77] += 1;
    kl_compare(KL_DTYPE_I32, got, ref, 100, &tol, NULL, &r, NULL);
    assert_false(r.ok);
    assert_int_equal(r.mismatched, 1);
    assert_int_equal(r.first_bad, 77);
    assert_non_null(strstr(r.detail, "exact"));
}

static void half_types_decode(void **state)
{
    (void)state;
    /* f16: 1.0 = 0x3C00, -2 = 0xC000, smallest subnormal = 0x0001, inf = 0x7C00 */
    uint16_t h[4] = {0x3C00, 0xC000, 0x0001, 0x7C00};
    assert_true(kl_element_double(KL_DTYPE_F16, h, 0) == 1.0);
    assert_true(kl_element_double(KL_DTYPE_F16, h, 1) == -2.0);
    assert_true(kl_element_double(KL_DTYPE_F16, h, 2) == ldexp(1.0, -24));
    assert_true(isinf(kl_element_double(KL_DTYPE_F16, h, 3)));
    /* bf16 is the top half of an f32 */
    float f = -3.5f;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t b = (uint16_t)(u >> 16);
    assert_true(kl_element_double(KL_DTYPE_BF16, &b, 0) == -3.5);
}

static void typed_and_bitwise(void **state)
{
    (void)state;
    float a[50], b[50];
    for (int i = 0; i < 50; i++) a[i] = b[i] = (float)i * 0.3f;
    int64_t first;
    assert_int_equal(kl_compare_bits(KL_DTYPE_F32, a, b, 50, &first), 0);
    assert_int_equal(first, -1);
    b[42] = nextafterf(b[42], 100.0f);
    b[44] = -b[44];
    assert_int_equal(kl_compare_bits(KL_DTYPE_F32, a, b, 50, &first), 2);
    assert_int_equal(first, 42);
    kl_tolerance tol = {1e-6, -1, false};
    kl_compare_result r;
    b[44] = a[44];
    assert_int_equal(kl_compare_typed(KL_DTYPE_F32, b, a, 50, &tol, &r, NULL), KL_OK);
    assert_true(r.ok); /* one ulp apart is within 1e-6 */
    tol.exact = true;
    kl_compare_typed(KL_DTYPE_F32, b, a, 50, &tol, &r, NULL);
    assert_false(r.ok);
    assert_int_equal(r.first_bad, 42);
}

static void bad_arguments(void **state)
{
    (void)state;
    kl_error err = {0};
    kl_compare_result r;
    kl_tolerance tol = {1e-5, -1, false};
    double ref[1] = {0};
    assert_int_equal(kl_compare(KL_DTYPE_NONE, ref, ref, 1, &tol, NULL, &r, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "dtype"));
    assert_int_equal(kl_compare(KL_DTYPE_F64, ref, ref, -1, &tol, NULL, &r, &err), KL_ERR_INVALID);
    /* an empty buffer is trivially within tolerance */
    assert_int_equal(kl_compare(KL_DTYPE_F64, ref, ref, 0, &tol, NULL, &r, &err), KL_OK);
    assert_true(r.ok);
}

/* Quartiles by linear interpolation, checked against the definition on shuffled input. */

/* slices run last to first, one at a time: the merge must not depend on the order */
static void run_reversed(void *ctx, unsigned n, void (*fn)(void *arg, unsigned k), void *arg)
{
    unsigned *calls = ctx;
    for (unsigned k = n; k-- > 0;) {
        fn(arg, k);
        (*calls)++;
    }
}

/* The sliced comparison gives the serial one's verdict, counts, first bad index and norms. */
static void sliced_compare_matches_serial(void **state)
{
    (void)state;
    const int64_t n = ((int64_t)1 << 19) + 4097;
    float *got = malloc((size_t)n * sizeof *got);
    double *ref = malloc((size_t)n * sizeof *ref);
    assert_non_null(got);
    assert_non_null(ref);
    for (int64_t i = 0; i < n; i++) {
        ref[i] = sin((double)i * 0.001) + 2.0;
        got[i] = (float)ref[i];
    }
    kl_tolerance tol = {1e-5, -1, false};
    unsigned calls = 0;
    kl_parallel par = {run_reversed, &calls, 7};
    kl_compare_result a, b;
    kl_error err = {0};
    /* all right */
    assert_int_equal(kl_compare(KL_DTYPE_F32, got, ref, n, &tol, NULL, &a, &err), KL_OK);
    assert_int_equal(kl_compare_par(KL_DTYPE_F32, got, ref, NULL, n, &tol, NULL, &par, &b, &err), KL_OK);
    assert_int_equal(calls, 7);
    assert_true(a.ok && b.ok);
    assert_true(fabs(a.rel_l2 - b.rel_l2) <= 1e-12 * (a.rel_l2 + 1e-30));
    /* faults in the third and last slices: the first one is reported, all are counted */
    unsigned char poison[4];
    memset(poison, kl_poison_byte(KL_DTYPE_F32, 0), sizeof poison);
    int64_t bad1 = 2 * (n / 7) + 100, bad2 = n - 3;
    memcpy(&got[bad1], poison, 4);
    got[bad2] = NAN;
    assert_int_equal(kl_compare(KL_DTYPE_F32, got, ref, n, &tol, poison, &a, &err), KL_OK);
    assert_int_equal(kl_compare_par(KL_DTYPE_F32, got, ref, NULL, n, &tol, poison, &par, &b, &err), KL_OK);
    assert_false(b.ok);
    assert_int_equal(b.first_bad, bad1);
    assert_int_equal(a.first_bad, b.first_bad);
    assert_int_equal(b.unwritten, 1);
    assert_int_equal(b.nan, 1);
    assert_int_equal(a.unwritten, b.unwritten);
    assert_int_equal(a.nan, b.nan);
    assert_string_equal(a.detail, b.detail);
    /* only the norm fails: the first large error is found after the merge */
    got[bad1] = (float)ref[bad1];
    got[bad2] = (float)ref[bad2];
    for (int64_t i = n - 1000; i < n; i++) got[i] = (float)(ref[i] * 1.01);
    assert_int_equal(kl_compare(KL_DTYPE_F32, got, ref, n, &tol, NULL, &a, &err), KL_OK);
    assert_int_equal(kl_compare_par(KL_DTYPE_F32, got, ref, NULL, n, &tol, NULL, &par, &b, &err), KL_OK);
    assert_false(b.ok);
    assert_int_equal(b.first_bad, n - 1000);
    assert_int_equal(a.first_bad, b.first_bad);
    assert_true(fabs(a.rel_l2 - b.rel_l2) <= 1e-12 * a.rel_l2);
    /* against another kernel's output, typed */
    float *other = malloc((size_t)n * sizeof *other);
    assert_non_null(other);
    memcpy(other, got, (size_t)n * sizeof *other);
    other[12345] += 1.0f;
    kl_tolerance exact = {0, -1, true};
    assert_int_equal(kl_compare_par(KL_DTYPE_F32, got, NULL, other, n, &exact, NULL, &par, &b, &err), KL_OK);
    assert_false(b.ok);
    assert_int_equal(b.mismatched, 1);
    assert_int_equal(b.first_bad, 12345);
    /* small counts run on the calling thread */
    calls = 0;
    assert_int_equal(kl_compare_par(KL_DTYPE_F32, got, ref, NULL, 1000, &tol, NULL, &par, &b, &err), KL_OK);
    assert_int_equal(calls, 0);
    assert_true(b.ok);
    free(other);
    free(got);
    free(ref);
}

static void stats_quartiles(void **state)
{
    (void)state;
    enum { M = 101 };
    double x[M];
    for (int i = 0; i < M; i++) x[i] = (double)((i * 37) % M); /* a permutation of 0..100 */
    kl_stats s;
    assert_int_equal(kl_stats_compute(x, M, &s, NULL), KL_OK);
    assert_true(s.median == 50.0);
    assert_true(s.q1 == 25.0);
    assert_true(s.q3 == 75.0);
    assert_true(s.iqr == 50.0);
    assert_true(s.min == 0.0 && s.max == 100.0);
    assert_true(fabs(s.mean - 50.0) < 1e-12);

    double y[4] = {4, 1, 3, 2};
    kl_stats_compute(y, 4, &s, NULL);
    assert_true(s.median == 2.5);
    assert_true(s.q1 == 1.75); /* 1 + 0.75 * (2 - 1) */
    assert_true(s.q3 == 3.25);
    kl_stats_compute(y, 1, &s, NULL);
    assert_true(s.median == 4.0 && s.iqr == 0.0);

    kl_error err = {0};
    assert_int_equal(kl_stats_compute(y, 0, &s, &err), KL_ERR_INVALID);
    double bad[2] = {1, NAN};
    assert_int_equal(kl_stats_compute(bad, 2, &s, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "sample 1"));
}

static void stats_settled(void **state)
{
    (void)state;
    enum { M = 200 };
    double x[M];
    /* tight: +-0.5% around 1.0 */
    for (int i = 0; i < M; i++) x[i] = 1.0 + 0.005 * sin(i * 1.7);
    assert_false(kl_stats_settled(x, 10, 20, 0.01)); /* fewer than the minimum */
    assert_true(kl_stats_settled(x, 20, 20, 0.01));
    assert_false(kl_stats_settled(x, 20, 20, 0.001));
    /* wide: +-30% uniform spread never settles at 1% with 20 samples */
    for (int i = 0; i < M; i++) x[i] = 1.0 + 0.3 * (((i * 7919) % 101) / 50.0 - 1.0);
    assert_false(kl_stats_settled(x, 20, 20, 0.01));
    /* but a few outliers in a tight set do not stop it */
    for (int i = 0; i < M; i++) x[i] = 1.0 + 0.001 * (i % 3);
    x[3] = 5.0;
    x[50] = 9.0;
    assert_true(kl_stats_settled(x, 60, 20, 0.01));
}

/* A deterministic pseudo-normal series: median m, standard deviation sd (sum of 12 uniforms). */
static void normal_series(double *x, unsigned n, double m, double sd, uint64_t seed)
{
    for (unsigned i = 0; i < n; i++) {
        double z = -6;
        for (int k = 0; k < 12; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            z += (double)(seed >> 11) * 0x1.0p-53;
        }
        x[i] = m + sd * z;
    }
}

static void stats_median_rse(void **state)
{
    (void)state;
    kl_stats st;
    double x[400];
    /* IQR 1.349 (sigma 1) around a median of 100 at n = 100: 1.2533 / 10 / 100 */
    for (unsigned i = 0; i < 100; i++) x[i] = 100 + (i < 25 ? -2.0 : i < 50 ? -0.6745 : i < 75 ? 0.6745 : 2.0);
    assert_int_equal(kl_stats_compute(x, 100, &st, NULL), KL_OK);
    double want = 1.2533 * (st.iqr / 1.349) / 10.0 / st.median;
    assert_true(fabs(kl_stats_median_rse(&st) - want) < 1e-12);
    /* all equal: zero spread, zero error */
    for (unsigned i = 0; i < 30; i++) x[i] = 0.25;
    kl_stats_compute(x, 30, &st, NULL);
    assert_true(kl_stats_median_rse(&st) == 0.0);
    /* one sample, or no positive median: cannot be estimated */
    kl_stats_compute(x, 1, &st, NULL);
    assert_true(isinf(kl_stats_median_rse(&st)));
    for (unsigned i = 0; i < 30; i++) x[i] = -1.0 + 0.01 * i;
    kl_stats_compute(x, 30, &st, NULL);
    assert_true(isinf(kl_stats_median_rse(&st)));
    assert_true(isinf(kl_stats_median_rse(NULL)));
    /* outliers beyond the quartiles do not move it much */
    normal_series(x, 200, 1.0, 0.02, 7);
    kl_stats_compute(x, 200, &st, NULL);
    double clean = kl_stats_median_rse(&st);
    x[10] = 50;
    x[20] = 80;
    kl_stats_compute(x, 200, &st, NULL);
    assert_true(fabs(kl_stats_median_rse(&st) - clean) < 0.1 * clean);
}

static void profile_stopping_rule(void **state)
{
    (void)state;
    enum { M = 400 };
    double a[M], b[M];
    const double *series[2] = {a, b};
    kl_profile_rule rule = {20, 200, 1.5, 0.01};
    double rse;

    /* a tiny kernel with 5% spread: not settled at the minimum (1.2533*0.05/sqrt(20) = 1.4%), settled
     * once n is large enough (about 40), far below max_reps and with no time spent */
    normal_series(a, M, 0.010, 0.0005, 1);
    normal_series(b, M, 0.030, 0.0003, 2);
    assert_int_equal(kl_profile_should_stop(&rule, series, 2, 10, 0.01, &rse), KL_PROFILE_GO_ON);
    assert_int_equal(kl_profile_should_stop(&rule, series, 2, 20, 0.01, &rse), KL_PROFILE_GO_ON);
    assert_true(rse > 0.01 && rse < 0.03);
    unsigned settled_at = 0;
    for (unsigned n = 20; n <= 200 && !settled_at; n += 10)
        if (kl_profile_should_stop(&rule, series, 2, n, 0.01, NULL) == KL_PROFILE_SETTLED) settled_at = n;
    assert_true(settled_at >= 30 && settled_at <= 80);
    /* the old rule (the 95% interval of the median within 1%) would still be running there */
    assert_false(kl_stats_settled(a, settled_at, 20, 0.01));

    /* a quiet kernel: settled at exactly min_reps, whatever the baseline does as long as it is quiet too */
    normal_series(a, M, 1.0, 0.001, 3);
    normal_series(b, M, 2.0, 0.002, 4);
    assert_int_equal(kl_profile_should_stop(&rule, series, 2, 19, 0.01, NULL), KL_PROFILE_GO_ON);
    assert_int_equal(kl_profile_should_stop(&rule, series, 2, 20, 0.01, &rse), KL_PROFILE_SETTLED);
    assert_true(rse < 0.001);
    /* every series must settle: a noisy baseline holds it back */
    normal_series(b, M, 2.0, 0.5, 5);
    assert_int_equal(kl_profile_should_stop(&rule, series, 2, 20, 0.01, NULL), KL_PROFILE_GO_ON);
    assert_int_equal(kl_profile_should_stop(&rule, series, 1, 20, 0.01, NULL), KL_PROFILE_SETTLED);
    /* ... until max_reps, or the time limit (which needs KL_PROFILE_FLOOR_REPS) */
    assert_int_equal(kl_profile_should_stop(&rule, series, 2, 200, 0.5, NULL), KL_PROFILE_MAX_REPS);
    assert_int_equal(kl_profile_should_stop(&rule, series, 2, 50, 1.5, NULL), KL_PROFILE_MAX_SECONDS);
    assert_int_equal(kl_profile_should_stop(&rule, series, 2, 2, 9.0, NULL), KL_PROFILE_GO_ON);
    assert_int_equal(kl_profile_should_stop(&rule, series, 2, 3, 9.0, NULL), KL_PROFILE_MAX_SECONDS);
    /* settled wins over the limits when both hold */
    assert_int_equal(kl_profile_should_stop(&rule, series, 1, 200, 9.0, NULL), KL_PROFILE_SETTLED);
    /* a bad sample (not finite) never settles */
    a[5] = NAN;
    assert_int_equal(kl_profile_should_stop(&rule, series, 1, 20, 0.0, &rse), KL_PROFILE_GO_ON);
    assert_true(isinf(rse));
    assert_string_equal(kl_profile_stop_name(KL_PROFILE_SETTLED), "settled");
    assert_string_equal(kl_profile_stop_name(KL_PROFILE_MAX_REPS), "max_reps");
    assert_string_equal(kl_profile_stop_name(KL_PROFILE_MAX_SECONDS), "max_seconds");
    assert_string_equal(kl_profile_stop_name(KL_PROFILE_GO_ON), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_copy_passes),
        cmocka_unit_test(rel_l2_edge),
        cmocka_unit_test(max_abs_edge),
        cmocka_unit_test(nan_and_inf_counted),
        cmocka_unit_test(unwritten_under_both_poisons),
        cmocka_unit_test(exact_tasks_need_equal_values),
        cmocka_unit_test(half_types_decode),
        cmocka_unit_test(typed_and_bitwise),
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(sliced_compare_matches_serial),
        cmocka_unit_test(stats_quartiles),
        cmocka_unit_test(stats_settled),
        cmocka_unit_test(stats_median_rse),
        cmocka_unit_test(profile_stopping_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
