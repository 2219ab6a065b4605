// The host side of an emulated run (tests/corpus/emulate.py generates a main() that uses it):
// tensors in their own pages, ending exactly at a page that cannot be touched (so a read or a
// write past the end faults), inputs made read-only after they are filled (so a write to an
// input faults), outputs poisoned, and the comparison against the float64 reference.
#ifndef KL_CUDA_EMU_HARNESS_H
#define KL_CUDA_EMU_HARNESS_H

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_bf16.h"

namespace harness {

enum Dtype { F32, BF16, F64, I32, U8, F16 };
enum Dist { NORMAL, UNIFORM, INT_UNIFORM };

inline size_t dtype_size(Dtype t) { return t == F64 ? 8 : (t == BF16 || t == F16) ? 2 : t == U8 ? 1 : 4; }

struct Tensor {
    Dtype dtype;
    int64_t count;
    void* p;          // first element
    void* map;        // the mapping
    size_t map_len;
    size_t slack;     // bytes between the end and the guard page
};

inline const char* g_where = "";
inline void on_fault(int sig)
{
    char msg[256];
    int n = snprintf(msg, sizeof msg, "emu: %s: signal %d (an access outside a tensor, or a write to an input)\n",
                     g_where, sig);
    if (n > 0) {
        ssize_t w = write(2, msg, (size_t)n);
        (void)w;
    }
    _exit(4);
}

// A tensor placed in its own pages, followed by a guard page that cannot be touched.
// layout < 0: the tensor starts 256-byte aligned (as cudaMalloc's do) and ends less than 256 bytes
// before the guard page; that slack is filled with a canary, checked afterwards for writes.
// layout >= 0: the tensor's last byte is `layout` bytes before the guard page (0: any access past
// the end faults; the start is then aligned only as far as the size allows).
inline const unsigned char kCanary = 0x5C;
inline Tensor make_tensor(Dtype t, int64_t count, long layout)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t bytes = (size_t)count * dtype_size(t);
    const size_t span = layout < 0 ? (bytes + 255) / 256 * 256 : bytes + (size_t)layout;
    const size_t data_pages = (span + page - 1) / page;
    const size_t len = (data_pages + 1) * page;
    char* m = (char*)mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "emu: cannot map %zu bytes\n", len);
        exit(3);
    }
    if (mprotect(m + data_pages * page, page, PROT_NONE) != 0) {
        perror("mprotect");
        exit(3);
    }
    char* start = m + data_pages * page - span;
    memset(start + bytes, kCanary, span - bytes);
    Tensor tt{t, count, start, m, len, span - bytes};
    return tt;
}
// True when the slack after the tensor still holds the canary (nothing was written past the end).
inline bool slack_intact(const Tensor& t, const char* name)
{
    const unsigned char* s = (const unsigned char*)t.p + (size_t)t.count * dtype_size(t.dtype);
    for (size_t i = 0; i < t.slack; i++)
        if (s[i] != kCanary) {
            printf("    %s: WRONG: a byte %zu past the end of the tensor was written\n", name, i);
            return false;
        }
    return true;
}
inline void protect_readonly(const Tensor& t)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t data_len = t.map_len - page;
    if (mprotect(t.map, data_len, PROT_READ) != 0) {
        perror("mprotect");
        exit(3);
    }
}
inline void release(Tensor& t) { munmap(t.map, t.map_len); }

// splitmix64
struct Rng {
    uint64_t s;
    uint64_t next()
    {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return (double)(next() >> 11) * 0x1.0p-53; }
};

inline void store(Tensor& t, int64_t i, double v)
{
    switch (t.dtype) {
    case F32: ((float*)t.p)[i] = (float)v; break;
    case F64: ((double*)t.p)[i] = v; break;
    case BF16: ((__nv_bfloat16*)t.p)[i] = __float2bfloat16((float)v); break;
    case I32: ((int32_t*)t.p)[i] = (int32_t)v; break;
    case U8: ((uint8_t*)t.p)[i] = (uint8_t)v; break;
    case F16: fprintf(stderr, "emu: f16 inputs are not emulated\n"); exit(3);
    }
}
inline double load(const Tensor& t, int64_t i)
{
    switch (t.dtype) {
    case F32: return ((const float*)t.p)[i];
    case F64: return ((const double*)t.p)[i];
    case BF16: return __bfloat162float(((const __nv_bfloat16*)t.p)[i]);
    case I32: return ((const int32_t*)t.p)[i];
    case U8: return ((const uint8_t*)t.p)[i];
    case F16: break;
    }
    return NAN;
}

inline void fill(Tensor& t, Dist d, double a, double b, uint64_t seed)
{
    Rng r{seed};
    for (int64_t i = 0; i < t.count; i++) {
        double v;
        if (d == NORMAL) {
            const double u1 = 1.0 - r.uniform(), u2 = r.uniform();
            v = a + b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        } else if (d == UNIFORM) {
            v = a + (b - a) * r.uniform();
        } else {
            const uint64_t span = (uint64_t)((int64_t)b - (int64_t)a) + 1;
            v = (double)((int64_t)a + (int64_t)(r.next() % span));
        }
        store(t, i, v);
    }
}
inline void poison(Tensor& t) { memset(t.p, (t.dtype == I32 || t.dtype == U8) ? 0xA5 : 0xFF, (size_t)t.count * dtype_size(t.dtype)); }

// The reference's view of a tensor: doubles for the floating types, the buffer itself otherwise.
inline void* reference_view(const Tensor& t, bool is_out)
{
    if (t.dtype == I32 || t.dtype == U8) {
        if (!is_out) return t.p;
        void* q = malloc((size_t)t.count * dtype_size(t.dtype) + 1);
        memset(q, 0xA5, (size_t)t.count * dtype_size(t.dtype));
        return q;
    }
    double* q = (double*)malloc(sizeof(double) * (size_t)(t.count + 1));
    for (int64_t i = 0; i < t.count; i++) q[i] = is_out ? NAN : load(t, i);
    return q;
}
inline double view_at(const Tensor& t, const void* view, int64_t i)
{
    if (t.dtype == I32) return ((const int32_t*)view)[i];
    if (t.dtype == U8) return ((const uint8_t*)view)[i];
    return ((const double*)view)[i];
}

// Compare output t with the reference's view; prints one line; true when within tolerance.
inline bool compare(const char* name, const Tensor& t, const void* ref, bool exact, double rel_l2, double max_abs)
{
    long double d2 = 0, r2 = 0;
    double worst = 0;
    int64_t nan = 0, bad_exact = 0, first_bad = -1;
    for (int64_t i = 0; i < t.count; i++) {
        const double k = load(t, i), r = view_at(t, ref, i);
        if (isnan(r)) {
            printf("    %s: the reference left element %lld NaN\n", name, (long long)i);
            return false;
        }
        if (isnan(k)) {
            if (first_bad < 0) first_bad = i;
            nan++;
            continue;
        }
        if (exact && k != r) {
            if (first_bad < 0) first_bad = i;
            bad_exact++;
        }
        const double d = k - r;
        d2 += (long double)d * d;
        r2 += (long double)r * r;
        if (fabs(d) > worst) worst = fabs(d);
    }
    const double rel = r2 > 0 ? (double)sqrtl(d2 / r2) : (double)sqrtl(d2);
    bool ok = nan == 0 && (exact ? bad_exact == 0 : rel <= rel_l2) && (max_abs <= 0 || worst <= max_abs);
    printf("    %s: %s rel_l2 %.3g max_abs %.3g", name, ok ? "ok" : "WRONG", rel, worst);
    if (nan) printf(", %lld NaN or unwritten", (long long)nan);
    if (exact && bad_exact) printf(", %lld differ", (long long)bad_exact);
    if (first_bad >= 0)
        printf(", first bad index %lld (kernel %.9g, reference %.9g)", (long long)first_bad, load(t, first_bad),
               view_at(t, ref, first_bad));
    printf("\n");
    return ok;
}

inline void install_fault_handler()
{
    static char altstack[1 << 16];
    stack_t ss{};
    ss.ss_sp = altstack;
    ss.ss_size = sizeof altstack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_handler = on_fault;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace harness
#endif
