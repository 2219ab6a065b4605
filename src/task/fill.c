/* Inputs: dtype codecs and deterministic random fills.
 *
 * The generator is counter based (splitmix64's mixing function over a counter): the value of
 * element i of argument a under seed s is a pure function of (s, a, i), so a buffer filled
 * in one call, in chunks, or on several threads holds the same bits on every machine. */
#include <float.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "task/task_int.h"
#include "util/util.h"

/* ---- codecs ------------------------------------------------------------------------------- */

/* Round |x| to a binary format with `ebits` exponent and `mbits` fraction bits, to nearest
 * even, with subnormals, overflow to infinity and a quiet NaN. Returns the bit pattern. */
static uint32_t encode_binary(double x, int ebits, int mbits)
{
    uint32_t sign = signbit(x) ? (uint32_t)1 << (ebits + mbits) : 0;
    uint32_t expmax = ((uint32_t)1 << ebits) - 1;
    if (isnan(x)) return sign | (expmax << mbits) | ((uint32_t)1 << (mbits - 1));
    double a = fabs(x);
    if (isinf(a)) return sign | (expmax << mbits);
    if (a == 0.0) return sign;
    int bias = (1 << (ebits - 1)) - 1;
    int emin = 1 - bias;
    int e2;
    (void)frexp(a, &e2);
    int e = e2 - 1; /* a in [2^e, 2^(e+1)) */
    if (e < emin) e = emin;
    /* a / 2^(e - mbits) is exact in double; rint rounds to nearest even. */
    double q = rint(ldexp(a, mbits - e));
    double one = ldexp(1.0, mbits);
    if (q >= 2.0 * one) { /* rounding carried into the next binade */
        q = one;
        e++;
    }
    if (q < one) return sign | (uint32_t)q; /* subnormal (or zero) */
    if (e + bias >= (int)expmax) return sign | (expmax << mbits);
    return sign | ((uint32_t)(e + bias) << mbits) | (uint32_t)(q - one);
}

uint16_t kl_double_to_half_bits(double x) { return (uint16_t)encode_binary(x, 5, 10); }
uint16_t kl_double_to_bf16_bits(double x) { return (uint16_t)encode_binary(x, 8, 7); }

double kl_half_bits_to_double(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0) v = ldexp((double)mant, -24);
    else if (exp == 31) v = mant ? NAN : INFINITY;
    else v = ldexp((double)(mant | 0x400), exp - 25);
    return sign ? -v : v;
}

double kl_bf16_bits_to_double(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return (double)f;
}

static float double_to_float(double x)
{
    if (isnan(x) || fabs(x) <= FLT_MAX) return (float)x;
    uint32_t bits = encode_binary(x, 8, 23);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static int64_t round_saturate(double x, int64_t lo, int64_t hi)
{
    if (isnan(x)) return 0;
    double r = rint(x);
    if (r <= (double)lo) return lo;
    if (r >= (double)hi) return hi;
    return (int64_t)r;
}

void kl_dtype_to_double(kl_dtype t, const void *src, double *dst, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        switch (t) {
        case KL_DTYPE_F32: {
            float f;
            memcpy(&f, (const char *)src + 4 * i, 4);
            dst[i] = f;
            break;
        }
        case KL_DTYPE_F64: memcpy(&dst[i], (const char *)src + 8 * i, 8); break;
        case KL_DTYPE_F16: {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = kl_half_bits_to_double(h);
            break;
        }
        case KL_DTYPE_BF16: {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = kl_bf16_bits_to_double(h);
            break;
        }
        case KL_DTYPE_I32: {
            int32_t v;
            memcpy(&v, (const char *)src + 4 * i, 4);
            dst[i] = v;
            break;
        }
        case KL_DTYPE_U8: dst[i] = ((const uint8_t *)src)[i]; break;
        case KL_DTYPE_NONE: dst[i] = 0; break;
        }
    }
}

static void store_one(kl_dtype t, double x, void *dst, int64_t i)
{
    switch (t) {
    case KL_DTYPE_F32: {
        float f = double_to_float(x);
        memcpy((char *)dst + 4 * i, &f, 4);
        break;
    }
    case KL_DTYPE_F64: memcpy((char *)dst + 8 * i, &x, 8); break;
    case KL_DTYPE_F16: {
        uint16_t h = kl_double_to_half_bits(x);
        memcpy((char *)dst + 2 * i, &h, 2);
        break;
    }
    case KL_DTYPE_BF16: {
        uint16_t h = kl_double_to_bf16_bits(x);
        memcpy((char *)dst + 2 * i, &h, 2);
        break;
    }
    case KL_DTYPE_I32: {
        int32_t v = (int32_t)round_saturate(x, INT32_MIN, INT32_MAX);
        memcpy((char *)dst + 4 * i, &v, 4);
        break;
    }
    case KL_DTYPE_U8: ((uint8_t *)dst)[i] = (uint8_t)round_saturate(x, 0, 255); break;
    case KL_DTYPE_NONE: break;
    }
}

void kl_dtype_from_double(kl_dtype t, const double *src, void *dst, int64_t count)
{
    for (int64_t i = 0; i < count; i++) store_one(t, src[i], dst, i);
}

size_t kl_dtype_size(kl_dtype t)
{
    switch (t) {
    case KL_DTYPE_F32: case KL_DTYPE_I32: return 4;
    case KL_DTYPE_F16: case KL_DTYPE_BF16: return 2;
    case KL_DTYPE_F64: return 8;
    case KL_DTYPE_U8: return 1;
    case KL_DTYPE_NONE: return 0;
    }
    return 0;
}

const char *kl_dtype_name(kl_dtype t)
{
    switch (t) {
    case KL_DTYPE_F32: return "f32";
    case KL_DTYPE_F16: return "f16";
    case KL_DTYPE_BF16: return "bf16";
    case KL_DTYPE_F64: return "f64";
    case KL_DTYPE_I32: return "i32";
    case KL_DTYPE_U8: return "u8";
    case KL_DTYPE_NONE: return "int";
    }
    return "?";
}

const char *kl_dtype_ctype(kl_dtype t)
{
    switch (t) {
    case KL_DTYPE_F32: return "float";
    case KL_DTYPE_F16: return "__half";
    case KL_DTYPE_BF16: return "__nv_bfloat16";
    case KL_DTYPE_F64: return "double";
    case KL_DTYPE_I32: return "int32_t";
    case KL_DTYPE_U8: return "uint8_t";
    case KL_DTYPE_NONE: return "int";
    }
    return "?";
}

/* ---- the generator -------------------------------------------------------------------------- */

#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* The stream of argument `arg` under `seed`. */
static uint64_t stream_key(uint64_t seed, unsigned arg)
{
    return mix64(mix64(seed + GOLDEN) ^ (((uint64_t)arg + 1) * UINT64_C(0xD6E8FEB86659FD93)));
}

static inline uint64_t draw(uint64_t key, uint64_t counter) { return mix64(key + (counter + 1) * GOLDEN); }

/* [0, 1) and (0, 1] with 53 random bits. */
static inline double unit_open_hi(uint64_t u) { return (double)(u >> 11) * 0x1.0p-53; }
static inline double unit_open_lo(uint64_t u) { return (double)((u >> 11) + 1) * 0x1.0p-53; }

/* A bound: an integer expression over the sizes, or (failing that) a plain number. */
kl_status kl_task_bound(const kl_task *task, const kl_shape *shape, const char *text, double *out, kl_error *err)
{
    int64_t iv;
    kl_error e1 = {0};
    kl_status st = kl_task_eval(task, shape, text, &iv, &e1);
    if (st == KL_OK) {
        *out = (double)iv;
        return KL_OK;
    }
    char *end = NULL;
    double d = text ? strtod(text, &end) : 0;
    if (text && end != text && *end == '\0' && isfinite(d) && strchr(text, 'x') == NULL &&
        strchr(text, 'X') == NULL) {
        *out = d;
        return KL_OK;
    }
    if (err) *err = e1;
    return st;
}

kl_status kl_task_fill_range(const kl_task *task, const kl_shape *shape, unsigned arg, uint64_t seed, void *buf,
                             int64_t first, int64_t count, kl_error *err)
{
    if (arg >= task->nargs) return kl_error_set(err, KL_ERR_INVALID, "argument %u: the task has %u", arg, task->nargs);
    const kl_arg *a = &task->args[arg];
    if (a->dtype == KL_DTYPE_NONE)
        return kl_error_set(err, KL_ERR_INVALID, "argument %u (%s) is a scalar, not a tensor", arg, a->name);
    if (a->role == KL_ROLE_OUT) return KL_OK;
    int64_t total;
    kl_status st = kl_task_arg_count(task, shape, arg, &total, err);
    if (st != KL_OK) return st;
    if (first < 0 || count < 0 || first > total || count > total - first)
        return kl_error_set(err, KL_ERR_INVALID,
                            "%s: elements [%lld, %lld) are outside the tensor's %lld elements at %s", a->name,
                            (long long)first, (long long)first + (long long)count, (long long)total, shape->label);
    uint64_t key = stream_key(seed, arg);
    switch (a->init.dist) {
    case KL_DIST_NORMAL: {
        const double two_pi = 6.283185307179586476925286766559;
        for (int64_t i = 0; i < count; i++) {
            uint64_t c = 2 * (uint64_t)(first + i);
            double u1 = unit_open_lo(draw(key, c)), u2 = unit_open_hi(draw(key, c + 1));
            double z = sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
            store_one(a->dtype, a->init.mean + a->init.std * z, buf, i);
        }
        break;
    }
    case KL_DIST_UNIFORM: {
        double lo, hi;
        st = kl_task_bound(task, shape, a->init.lo, &lo, err);
        if (st == KL_OK) st = kl_task_bound(task, shape, a->init.hi, &hi, err);
        if (st != KL_OK) return kl_error_prefix(err, "%s: init bounds", a->name);
        for (int64_t i = 0; i < count; i++) {
            double u = unit_open_hi(draw(key, (uint64_t)(first + i)));
            double v = lo + (hi - lo) * u;
            if (v > hi) v = hi;
            store_one(a->dtype, v, buf, i);
        }
        break;
    }
    case KL_DIST_INT_UNIFORM: {
        int64_t lo, hi;
        st = kl_task_eval(task, shape, a->init.lo, &lo, err);
        if (st == KL_OK) st = kl_task_eval(task, shape, a->init.hi, &hi, err);
        if (st != KL_OK) return kl_error_prefix(err, "%s: init bounds", a->name);
        if (hi < lo)
            return kl_error_set(err, KL_ERR_INVALID, "%s: int_uniform bounds [%lld, %lld] are empty at %s", a->name,
                                (long long)lo, (long long)hi, shape->label);
        /* range may be 2^64 (the whole int64 line): then every draw is in range. */
        uint64_t range = (uint64_t)hi - (uint64_t)lo + 1;
        for (int64_t i = 0; i < count; i++) {
            uint64_t u = draw(key, (uint64_t)(first + i));
            uint64_t off = range ? (uint64_t)(((unsigned __int128)u * range) >> 64) : u;
            int64_t v = (int64_t)((uint64_t)lo + off);
            if (a->dtype == KL_DTYPE_I32) {
                int32_t w = (int32_t)v; /* validated to fit */
                memcpy((char *)buf + 4 * i, &w, 4);
            } else if (a->dtype == KL_DTYPE_U8) {
                ((uint8_t *)buf)[i] = (uint8_t)v;
            } else {
                store_one(a->dtype, (double)v, buf, i);
            }
        }
        break;
    }
    case KL_DIST_NONE:
        return kl_error_set(err, KL_ERR_INVALID, "%s: no input distribution", a->name);
    }
    return KL_OK;
}

kl_status kl_task_fill(const kl_task *task, const kl_shape *shape, unsigned arg, uint64_t seed, void *buf,
                       int64_t count, kl_error *err)
{
    int64_t want;
    kl_status st = kl_task_arg_count(task, shape, arg, &want, err);
    if (st != KL_OK) return st;
    if (count != want)
        return kl_error_set(err, KL_ERR_INVALID, "%s: the buffer holds %lld elements, the tensor has %lld at %s",
                            task->args[arg].name, (long long)count, (long long)want, shape->label);
    return kl_task_fill_range(task, shape, arg, seed, buf, 0, count, err);
}
