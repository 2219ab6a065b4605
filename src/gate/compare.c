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

/* What a slice of the elements adds up to; slices merge in index order. */
typedef struct cmp_part {
    long double sum_d2, sum_r2;
    double max_abs;
    int64_t nref_finite, nan, inf, unwritten, mismatched, first_bad;
} cmp_part;

typedef struct cmp_job {
    kl_dtype dtype;
    const void *got;
    const ref_view *rv;
    int64_t count;
    const kl_tolerance *tol;
    const void *poison;
    size_t es;
    unsigned nslices;
    cmp_part *parts;
} cmp_job;

/* One element: got g (bytes at gp) against reference r. */
static inline void cmp_element(const cmp_job *j, cmp_part *p, const unsigned char *gp, double g, double r, int64_t i,
                               double *d2, double *r2)
{
    bool bad = false;
    if (j->poison && memcmp(gp, j->poison, j->es) == 0 && !agrees(g, r)) {
        p->unwritten++;
        bad = true;
    } else if (isnan(g)) {
        if (!isnan(r)) {
            p->nan++;
            bad = true;
        }
    } else if (isinf(g)) {
        if (g != r) {
            p->inf++;
            bad = true;
        }
    } else if (!isfinite(r)) {
        p->mismatched++; /* finite where the reference is NaN or infinite */
        bad = true;
    } else {
        double d = fabs(g - r);
        *d2 += d * d;
        *r2 += r * r;
        p->nref_finite++;
        if (d > p->max_abs) p->max_abs = d;
        if ((j->tol->exact && g != r) || (!j->tol->exact && j->tol->max_abs >= 0 && d > j->tol->max_abs)) {
            p->mismatched++;
            bad = true;
        }
    }
    if (bad && p->first_bad < 0) p->first_bad = i;
}

/* Elements [lo, hi): sums in double over runs of 1024 elements, carried in long double. */
static void cmp_range(const cmp_job *j, int64_t lo, int64_t hi, cmp_part *p)
{
    memset(p, 0, sizeof *p);
    p->first_bad = -1;
    const unsigned char *g8 = j->got;
    for (int64_t b = lo; b < hi; b += 1024) {
        int64_t e = b + 1024 < hi ? b + 1024 : hi;
        double d2 = 0, r2 = 0;
        if (j->dtype == KL_DTYPE_F32 && j->rv->d) {
            const double *ref = j->rv->d;
            for (int64_t i = b; i < e; i++) {
                float f;
                memcpy(&f, g8 + 4 * i, 4);
                cmp_element(j, p, g8 + 4 * i, f, ref[i], i, &d2, &r2);
            }
        } else {
            for (int64_t i = b; i < e; i++)
                cmp_element(j, p, g8 + (size_t)i * j->es, kl_element_double(j->dtype, j->got, i), ref_at(j->rv, i), i,
                            &d2, &r2);
        }
        p->sum_d2 += d2;
        p->sum_r2 += r2;
    }
}

static void cmp_slice(void *arg, unsigned k)
{
    cmp_job *j = arg;
    int64_t per = (j->count + j->nslices - 1) / j->nslices;
    per = (per + 1023) / 1024 * 1024; /* whole runs of 1024: the same partial sums as one thread */
    int64_t lo = (int64_t)k * per;
    if (lo > j->count) lo = j->count;
    int64_t hi = lo + per < j->count ? lo + per : j->count;
    cmp_range(j, lo, hi, &j->parts[k]);
}

static kl_status compare_impl(kl_dtype dtype, const void *got, const ref_view *rv, int64_t count,
                              const kl_tolerance *tol, const void *poison, const kl_parallel *par,
                              kl_compare_result *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    out->first_bad = -1;
    size_t es = elem_size(dtype);
    if (es == 0) return kl_error_set(err, KL_ERR_INVALID, "compare: dtype %d is not a tensor type", (int)dtype);
    if (count < 0) return kl_error_set(err, KL_ERR_INVALID, "compare: negative element count %lld", (long long)count);
    out->count = count;

    cmp_job j = {dtype, got, rv, count, tol, poison, es, 1, NULL};
    cmp_part one;
    j.parts = &one;
    if (par && par->run && par->slices > 1 && count >= KL_COMPARE_PARALLEL_MIN) {
        cmp_part *parts = calloc(par->slices, sizeof *parts);
        if (parts) {
            j.nslices = par->slices;
            j.parts = parts;
        }
    }
    if (j.nslices > 1) par->run(par->ctx, j.nslices, cmp_slice, &j);
    else cmp_range(&j, 0, count, &one);
    /* merge in index order: the first bad element is the first slice's that has one */
    cmp_part m;
    memset(&m, 0, sizeof m);
    m.first_bad = -1;
    for (unsigned k = 0; k < j.nslices; k++) {
        const cmp_part *p = &j.parts[k];
        m.sum_d2 += p->sum_d2;
        m.sum_r2 += p->sum_r2;
        if (p->max_abs > m.max_abs) m.max_abs = p->max_abs;
        m.nref_finite += p->nref_finite;
        m.nan += p->nan;
        m.inf += p->inf;
        m.unwritten += p->unwritten;
        m.mismatched += p->mismatched;
        if (m.first_bad < 0) m.first_bad = p->first_bad;
    }
    if (j.parts != &one) free(j.parts);
    out->nan = m.nan;
    out->inf = m.inf;
    out->unwritten = m.unwritten;
    out->mismatched = m.mismatched;
    out->first_bad = m.first_bad;
    long double sum_d2 = m.sum_d2, sum_r2 = m.sum_r2;
    int64_t nref_finite = m.nref_finite;
    out->max_abs = m.max_abs;
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
    return compare_impl(dtype, got, &rv, count, tol, poison, NULL, out, err);
}

kl_status kl_compare_typed(kl_dtype dtype, const void *got, const void *ref, int64_t count, const kl_tolerance *tol,
                           kl_compare_result *out, kl_error *err)
{
    ref_view rv = {NULL, ref, dtype};
    return compare_impl(dtype, got, &rv, count, tol, NULL, NULL, out, err);
}

kl_status kl_compare_par(kl_dtype dtype, const void *got, const double *ref, const void *ref_typed, int64_t count,
                         const kl_tolerance *tol, const void *poison, const kl_parallel *par, kl_compare_result *out,
                         kl_error *err)
{
    ref_view rv = {ref, ref ? NULL : ref_typed, ref ? KL_DTYPE_F64 : dtype};
    return compare_impl(dtype, got, &rv, count, tol, poison, par, out, err);
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
