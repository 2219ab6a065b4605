/* Comparison of a kernel's outputs against the float64 reference (measure.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gate/measure.h"
#include "util/util.h"

static double half_to_double(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0) v = ldexp((double)m, -24);                 /* subnormal or zero */
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m | 0x400), e - 25);
    return sign ? -v : v;
}

static double bf16_to_double(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return (double)f;
}

double kl_element_double(kl_dtype dtype, const void *buf, int64_t i)
{
    const unsigned char *p = buf;
    switch (dtype) {
    case KL_DTYPE_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case KL_DTYPE_F64: {
        double d;
        memcpy(&d, p + 8 * i, 8);
        return d;
    }
    case KL_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return half_to_double(h);
    }
    case KL_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return bf16_to_double(h);
    }
    case KL_DTYPE_I32: {
        int32_t v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    case KL_DTYPE_U8: return p[i];
    case KL_DTYPE_NONE: break;
    }
    return 0.0;
}

static size_t elem_size(kl_dtype t)
{
    switch (t) {
    case KL_DTYPE_F32: case KL_DTYPE_I32: return 4;
    case KL_DTYPE_F16: case KL_DTYPE_BF16: return 2;
    case KL_DTYPE_F64: return 8;
    case KL_DTYPE_U8: return 1;
    case KL_DTYPE_NONE: break;
    }
    return 0;
}

unsigned char kl_poison_byte(kl_dtype dtype, int pass)
{
    if (pass == 0) return 0xFF;
    /* 0x7B7B is 61280 in f16 (0x7F7F would be a NaN there); 0x7F.. is a large finite
     * value in f32, bf16 and f64, and a sentinel in the integer types. */
    return dtype == KL_DTYPE_F16 ? 0x7B : 0x7F;
}

static bool agrees(double g, double r) { return g == r || (isnan(g) && isnan(r)); }

/* The reference as an accessor: doubles, or a typed buffer. */
typedef struct ref_view {
    const double *d;
    const void *typed;
    kl_dtype dtype;
} ref_view;

static double ref_at(const ref_view *rv, int64_t i) { return rv->d ? rv->d[i] : kl_element_double(rv->dtype, rv->typed, i); }

static kl_status compare_impl(kl_dtype dtype, const void *got, const ref_view *rv, int64_t count,
                              const kl_tolerance *tol, const void *poison, kl_compare_result *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    out->first_bad = -1;
    size_t es = elem_size(dtype);
    if (es == 0) return kl_error_set(err, KL_ERR_INVALID, "compare: dtype %d is not a tensor type", (int)dtype);
    if (count < 0) return kl_error_set(err, KL_ERR_INVALID, "compare: negative element count %lld", (long long)count);
    out->count = count;

    const unsigned char *g8 = got;
    long double sum_d2 = 0, sum_r2 = 0;
    double max_abs = 0;
    int64_t nref_finite = 0;
    for (int64_t i = 0; i < count; i++) {
        double g = kl_element_double(dtype, got, i), r = ref_at(rv, i);
        bool bad = false;
        if (poison && memcmp(g8 + (size_t)i * es, poison, es) == 0 && !agrees(g, r)) {
            out->unwritten++;
            bad = true;
        } else if (isnan(g)) {
            if (!isnan(r)) {
                out->nan++;
                bad = true;
            }
        } else if (isinf(g)) {
            if (g != r) {
                out->inf++;
                bad = true;
            }
        } else if (!isfinite(r)) {
            out->mismatched++; /* finite where the reference is NaN or infinite */
            bad = true;
        } else {
            double d = fabs(g - r);
            sum_d2 += (long double)d * d;
            sum_r2 += (long double)r * r;
            nref_finite++;
            if (d > max_abs) max_abs = d;
            if ((tol->exact && g != r) || (!tol->exact && tol->max_abs >= 0 && d > tol->max_abs)) {
                out->mismatched++;
                bad = true;
            }
        }
        if (bad && out->first_bad < 0) out->first_bad = i;
    }
    out->max_abs = max_abs;
    out->rel_l2 = sum_r2 > 0 ? (double)sqrtl(sum_d2 / sum_r2) : (double)sqrtl(sum_d2);
    bool rel_ok = tol->exact || out->rel_l2 <= tol->rel_l2;
    bool elems_ok = out->nan == 0 && out->inf == 0 && out->unwritten == 0 && out->mismatched == 0;
    out->ok = rel_ok && elems_ok;

    if (!rel_ok && out->first_bad < 0) {
        /* Only the norm failed: some element has |d| > tol * rms(ref), else the sum could not exceed. */
        double rms = nref_finite ? (double)sqrtl(sum_r2 / nref_finite) : 0.0;
        double bound = sum_r2 > 0 ? tol->rel_l2 * rms : tol->rel_l2 / sqrt((double)(nref_finite ? nref_finite : 1));
        for (int64_t i = 0; i < count; i++) {
            double g = kl_element_double(dtype, got, i), r = ref_at(rv, i);
            if (isfinite(g) && isfinite(r) && fabs(g - r) > bound) {
                out->first_bad = i;
                break;
            }
        }
    }

    if (out->ok) {
        kl_snprintf(out->detail, sizeof out->detail, "within tolerance");
    } else if (out->unwritten) {
        kl_snprintf(out->detail, sizeof out->detail, "%lld of %lld elements unwritten (still poisoned), first at %lld",
                    (long long)out->unwritten, (long long)count, (long long)out->first_bad);
    } else if (out->nan || out->inf) {
        kl_snprintf(out->detail, sizeof out->detail, "%lld NaN and %lld Inf elements the reference does not have, first at %lld",
                    (long long)out->nan, (long long)out->inf, (long long)out->first_bad);
    } else if (out->mismatched) {
        kl_snprintf(out->detail, sizeof out->detail, "%lld elements %s, first at %lld (max abs error %.3g)",
                    (long long)out->mismatched,
                    tol->exact ? "differ from the exact reference" : "past the max_abs bound or not finite like the reference",
                    (long long)out->first_bad, out->max_abs);
    } else {
        kl_snprintf(out->detail, sizeof out->detail, "relative L2 error %.3g exceeds %.3g, first large error at %lld",
                    out->rel_l2, tol->rel_l2, (long long)out->first_bad);
    }
    return KL_OK;
}

kl_status kl_compare(kl_dtype dtype, const void *got, const double *ref, int64_t count, const kl_tolerance *tol,
                     const void *poison, kl_compare_result *out, kl_error *err)
{
    ref_view rv = {ref, NULL, KL_DTYPE_F64};
    return compare_impl(dtype, got, &rv, count, tol, poison, out, err);
}

kl_status kl_compare_typed(kl_dtype dtype, const void *got, const void *ref, int64_t count, const kl_tolerance *tol,
                           kl_compare_result *out, kl_error *err)
{
    ref_view rv = {NULL, ref, dtype};
    return compare_impl(dtype, got, &rv, count, tol, NULL, out, err);
}

int64_t kl_compare_bits(kl_dtype dtype, const void *a, const void *b, int64_t count, int64_t *first_diff)
{
    size_t es = elem_size(dtype);
    const unsigned char *pa = a, *pb = b;
    int64_t n = 0;
    *first_diff = -1;
    if (es == 0 || count <= 0) return 0;
    if (memcmp(pa, pb, (size_t)count * es) == 0) return 0;
    for (int64_t i = 0; i < count; i++) {
        if (memcmp(pa + (size_t)i * es, pb + (size_t)i * es, es) != 0) {
            if (*first_diff < 0) *first_diff = i;
            n++;
        }
    }
    return n;
}
