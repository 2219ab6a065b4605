/*
 * klineage device runtime: the kl_rt_* C ABI of runtime.h over the CUDA runtime, CUPTI
 * and (loaded on demand) cuBLAS. Built by kl_runtime_build with
 *   nvcc -O2 -shared -Xcompiler -fPIC -cudart shared -arch=sm_XX runtime.cu -lcupti -ldl
 * and dlopen()ed by klineage-worker, which itself links no CUDA library.
 *
 * One process, one device: the state is a single static struct. Every function reports
 * failures through its return code and the message kl_rt_error() returns; nothing here
 * prints or exits.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cupti.h>
#include <cublas_v2.h> /* types only: libcublas is dlopen()ed, never linked */

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime.h"

#ifndef KL_RT_CUDA_LIB64
#define KL_RT_CUDA_LIB64 "/usr/local/cuda/lib64"
#endif

/* ---- state ------------------------------------------------------------------------------- */

enum { REC_COPY = 0, REC_KERNEL = 1, REC_MARK = 2, REC_HOSTCOPY = 3 }; /* HOSTCOPY: to, from or on the host */

typedef struct rt_record {
    uint64_t start, end;
    int kind;                  /* REC_* */
} rt_record;

typedef cublasStatus_t (*cublas_create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*cublas_destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*cublas_set_stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*cublas_set_math_fn)(cublasHandle_t, cublasMath_t);
typedef cublasStatus_t (*cublas_sgemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                          const float *, const float *, int, const float *, int, const float *,
                                          float *, int);
typedef cublasStatus_t (*cublas_gemmex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                           const void *, const void *, cudaDataType, int, const void *, cudaDataType,
                                           int, const void *, void *, cudaDataType, int, cublasComputeType_t,
                                           cublasGemmAlgo_t);

/* guards the records CUPTI delivers on its own thread */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static struct rt_state {
    int inited;
    int ordinal;
    int l2_bytes;
    cudaStream_t readback;
    cudaEvent_t ev0, ev1, ev_idle;
    void *flush_buf;
    size_t flush_bytes;
    unsigned flush_count;

    int timer;                 /* KL_RT_TIMER_* */
    int cupti_registered;
    rt_record *recs;           /* records of the batch (guarded by mu) */
    size_t nrecs, caprecs;
    size_t dropped, incomplete;
    unsigned markers_seen;     /* marker records delivered in the batch (mu) */
    int rec_oom;

    /* the window markers: an empty kernel on a stream of our own */
    cudaStream_t mark;
    uint32_t mark_stream_id;
    int mark_stream_known;

    int cublas_tried;
    void *cublas_lib;
    cublasHandle_t cublas;
    cublas_create_fn cb_create;
    cublas_destroy_fn cb_destroy;
    cublas_set_stream_fn cb_set_stream;
    cublas_set_math_fn cb_set_math;
    cublas_sgemm_fn cb_sgemm;
    cublas_gemmex_fn cb_gemmex;

    char err[1024];
    char err_name[96];

    /* batched windows (kl_rt_batch_*) */
    unsigned batch_max, batch_n;
    int batch_on, window_on;
    uint64_t *host_begin, *host_end; /* CLOCK_MONOTONIC of each window's open and close */
    unsigned *win_marks;             /* kl_rt_mark() calls inside each window */
    unsigned win_cap;
    cudaEvent_t *bev;                /* events: 2 per window, created on demand and kept */
    unsigned bev_n;

    unsigned long long *digest_sum; /* kl_rt_digest's accumulator, allocated on first use */
    int smem_poison_ready;          /* the poison kernel's shared memory attribute is set */
    int smem_bytes;                 /* how much dynamic shared memory it takes */
} g;

static void set_err(const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.err, sizeof g.err, fmt, ap);
    va_end(ap);
    snprintf(g.err_name, sizeof g.err_name, "%s", name ? name : "");
}

/* Errors that leave the context unusable: every later call fails the same way. */
static int is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
        return 1;
    default:
        return 0;
    }
}

/* Record a failed CUDA call; returns the KL_RT code for it. */
static int cuda_fail(cudaError_t e, const char *what)
{
    int sticky = is_sticky(e);
    if (!sticky) {
        /* clear it; if the next query still fails, the context is gone */
        (void)cudaGetLastError();
        cudaError_t again = cudaGetLastError();
        if (again != cudaSuccess && is_sticky(again)) sticky = 1;
    }
    set_err(cudaGetErrorName(e), "%s: %s (%s)%s", what, cudaGetErrorString(e), cudaGetErrorName(e),
            sticky ? "; the CUDA context is lost (sticky error)" : "");
    return sticky ? KL_RT_ERR_STICKY : KL_RT_ERR_CUDA;
}

#define CK(call, what)                                                                         \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) return cuda_fail(e_, what);                                     \
    } while (0)

#define NEED_INIT()                                                                            \
    do {                                                                                       \
        if (!g.inited) {                                                                       \
            set_err("", "the runtime is not initialised (kl_rt_init)");                        \
            return KL_RT_ERR_INVALID;                                                          \
        }                                                                                      \
    } while (0)

extern "C" int kl_rt_abi(void) { return KL_RT_ABI; }
extern "C" const char *kl_rt_error(void) { return g.err; }
extern "C" const char *kl_rt_error_name(void) { return g.err_name; }

/* ---- kernels ------------------------------------------------------------------------------- */

/* splitmix64's finalizer: every input bit moves every output bit. */
__device__ __forceinline__ unsigned long long kl_rt_mix(unsigned long long z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The digest of kl_rt_digest: word i (8 bytes, little-endian, the last one zero-padded)
 * contributes mix(word ^ mix(i)); the sum is order-free, so blocks may finish in any order
 * and the result is still exact. aligned: p is 8-byte aligned and whole words are loaded. */
__global__ void kl_rt_digest_kernel(const unsigned char *p, size_t bytes, int aligned, unsigned long long *sum)
{
    const size_t words = (bytes + 7) / 8, full = bytes / 8;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned long long acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        unsigned long long w = 0;
        if (aligned && i < full) {
            w = reinterpret_cast<const unsigned long long *>(p)[i];
        } else {
            const size_t end = (i + 1) * 8 < bytes ? (i + 1) * 8 : bytes;
            for (size_t b = i * 8; b < end; b++) w |= (unsigned long long)p[b] << (8 * (b - i * 8));
        }
        acc += kl_rt_mix(w ^ kl_rt_mix(i));
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(sum, acc);
}

__global__ void kl_rt_flush_kernel(int4 *buf, size_t n, int v)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    int4 w = make_int4(v, v ^ 0x55, v ^ 0xAA, v ^ 0xFF);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) buf[i] = w;
}

/* The window marker: does nothing; its activity record's timestamps are the window's edges on
 * the GPU's clock. */
__global__ void kl_rt_window_mark(void) {}

/* Every word of the block's dynamic shared memory written with `pattern`: volatile, so the
 * stores stay although nothing reads them. */
__global__ void kl_rt_smem_fill_kernel(unsigned words, unsigned pattern)
{
    extern __shared__ unsigned kl_rt_smem[];
    volatile unsigned *s = kl_rt_smem;
    for (unsigned i = threadIdx.x; i < words; i += blockDim.x) s[i] = pattern;
}

#define FMA_CHAINS 8
#define FMA_UNROLL 16
__global__ void kl_rt_fma_kernel(float *out, int iters, float a, float b)
{
    float x[FMA_CHAINS];
#pragma unroll
    for (int j = 0; j < FMA_CHAINS; j++) x[j] = (float)threadIdx.x * 1e-3f + (float)j;
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int u = 0; u < FMA_UNROLL; u++) {
#pragma unroll
            for (int j = 0; j < FMA_CHAINS; j++) x[j] = fmaf(x[j], a, b);
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < FMA_CHAINS; j++) s += x[j];
    out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = s;
}

#define MMA_ACC 8
__global__ void kl_rt_mma_kernel(float *out, int iters)
{
    float acc[MMA_ACC][4];
#pragma unroll
    for (int k = 0; k < MMA_ACC; k++)
        for (int j = 0; j < 4; j++) acc[k][j] = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    /* bf16 pairs of small values: 0x3C23 is about 0.01 */
    unsigned a0 = 0x3C233C23u ^ (threadIdx.x & 7), a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3;
    unsigned b0 = 0x3C233C23u ^ (threadIdx.x & 3), b1 = b0 + 1;
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int k = 0; k < MMA_ACC; k++) {
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                         : "+f"(acc[k][0]), "+f"(acc[k][1]), "+f"(acc[k][2]), "+f"(acc[k][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
#endif
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < MMA_ACC; k++)
        for (int j = 0; j < 4; j++) s += acc[k][j];
    out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = s;
}

/* ---- lifetime ------------------------------------------------------------------------------ */

extern "C" int kl_rt_init(int ordinal)
{
    if (g.inited) return KL_RT_OK;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (e == cudaSuccess) set_err("cudaErrorNoDevice", "cudaGetDeviceCount: no CUDA-capable device is present");
        else set_err(cudaGetErrorName(e), "cudaGetDeviceCount: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return KL_RT_ERR_NO_DEVICE;
    }
    if (ordinal < 0 || ordinal >= n) {
        set_err("cudaErrorInvalidDevice", "device %d requested, %d present", ordinal, n);
        return KL_RT_ERR_NO_DEVICE;
    }
    CK(cudaSetDevice(ordinal), "cudaSetDevice");
    CK(cudaFree(0), "creating the CUDA context (cudaFree(0))");
    CK(cudaDeviceGetAttribute(&g.l2_bytes, cudaDevAttrL2CacheSize, ordinal), "cudaDeviceGetAttribute(L2 size)");
    CK(cudaStreamCreateWithFlags(&g.readback, cudaStreamNonBlocking), "cudaStreamCreateWithFlags(readback)");
    CK(cudaEventCreate(&g.ev0), "cudaEventCreate");
    CK(cudaEventCreate(&g.ev1), "cudaEventCreate");
    CK(cudaEventCreateWithFlags(&g.ev_idle, cudaEventDisableTiming), "cudaEventCreate");
    /* the L2 flush buffer: twice the L2, at least 64 MiB, a whole number of int4 */
    g.flush_bytes = (size_t)g.l2_bytes * 2;
    if (g.flush_bytes < ((size_t)64 << 20)) g.flush_bytes = (size_t)64 << 20;
    g.flush_bytes &= ~(size_t)15;
    CK(cudaMalloc(&g.flush_buf, g.flush_bytes), "cudaMalloc(L2 flush buffer)");
    /* the markers' stream: non-blocking (it waits for no other stream, and the legacy stream
     * does not wait for it) and of the highest priority (a marker starts as soon as a block slot
     * is free, ahead of blocks still queued from other streams) */
    int least = 0, greatest = 0;
    CK(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    CK(cudaStreamCreateWithPriority(&g.mark, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority(markers)");
    g.ordinal = ordinal;
    g.inited = 1;
    return KL_RT_OK;
}

static void cublas_unload(void);

extern "C" void kl_rt_fini(void)
{
    if (g.cupti_registered) {
        cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
        cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        g.cupti_registered = 0;
    }
    cublas_unload();
    if (g.inited) {
        for (unsigned i = 0; i < g.bev_n; i++) cudaEventDestroy(g.bev[i]);
        cudaFree(g.flush_buf);
        cudaFree(g.digest_sum);
        g.digest_sum = NULL;
        cudaEventDestroy(g.ev0);
        cudaEventDestroy(g.ev1);
        cudaEventDestroy(g.ev_idle);
        cudaStreamDestroy(g.readback);
        cudaStreamDestroy(g.mark);
        g.mark = NULL;
    }
    pthread_mutex_lock(&g_mu);
    free(g.recs);
    g.recs = NULL;
    g.nrecs = g.caprecs = 0;
    pthread_mutex_unlock(&g_mu);
    free(g.bev);
    free(g.host_begin);
    free(g.host_end);
    free(g.win_marks);
    g.bev = NULL;
    g.host_begin = g.host_end = NULL;
    g.win_marks = NULL;
    g.mark_stream_known = 0;
    g.smem_poison_ready = 0;
    g.bev_n = g.win_cap = g.batch_max = g.batch_n = 0;
    g.batch_on = g.window_on = 0;
    g.inited = 0;
    g.timer = KL_RT_TIMER_NONE;
}

extern "C" int kl_rt_device_info(kl_rt_device *out)
{
    NEED_INIT();
    memset(out, 0, sizeof *out);
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, g.ordinal), "cudaGetDeviceProperties");
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->ordinal = g.ordinal;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sms = p.multiProcessorCount;
    out->l2_bytes = p.l2CacheSize;
    out->mem_bytes = (uint64_t)p.totalGlobalMem;
    out->mem_bus_bits = p.memoryBusWidth;
    out->smem_per_block_optin = (int)p.sharedMemPerBlockOptin;
    out->regs_per_sm = p.regsPerMultiprocessor;
    /* clocks are attributes (no longer fields of cudaDeviceProp); a device may not report them */
    if (cudaDeviceGetAttribute(&out->clock_khz, cudaDevAttrClockRate, g.ordinal) != cudaSuccess) out->clock_khz = 0;
    if (cudaDeviceGetAttribute(&out->mem_clock_khz, cudaDevAttrMemoryClockRate, g.ordinal) != cudaSuccess)
        out->mem_clock_khz = 0;
    (void)cudaGetLastError();
    CK(cudaDriverGetVersion(&out->driver_version), "cudaDriverGetVersion");
    CK(cudaRuntimeGetVersion(&out->runtime_version), "cudaRuntimeGetVersion");
    return KL_RT_OK;
}

/* ---- memory ---------------------------------------------------------------------------------- */

extern "C" int kl_rt_malloc(void **ptr, size_t bytes)
{
    NEED_INIT();
    *ptr = NULL;
    cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "cudaMalloc(%zu bytes)", bytes);
        return cuda_fail(e, what);
    }
    return KL_RT_OK;
}

extern "C" int kl_rt_free(void *ptr)
{
    NEED_INIT();
    if (!ptr) return KL_RT_OK;
    CK(cudaFree(ptr), "cudaFree");
    return KL_RT_OK;
}

extern "C" int kl_rt_memset(void *dptr, int byte, size_t bytes)
{
    NEED_INIT();
    CK(cudaMemset(dptr, byte, bytes), "cudaMemset");
    CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemset");
    return KL_RT_OK;
}

extern "C" int kl_rt_h2d(void *dst, const void *src, size_t bytes)
{
    NEED_INIT();
    CK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host to device");
    return KL_RT_OK;
}

extern "C" int kl_rt_d2h(void *dst, const void *src, size_t bytes)
{
    NEED_INIT();
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g.readback), "cudaMemcpyAsync device to host");
    CK(cudaStreamSynchronize(g.readback), "cudaStreamSynchronize(readback)");
    return KL_RT_OK;
}

extern "C" int kl_rt_d2d(void *dst, const void *src, size_t bytes)
{
    NEED_INIT();
    CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy device to device");
    CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize after a device copy");
    return KL_RT_OK;
}

extern "C" int kl_rt_digest(const void *dptr, size_t bytes, uint64_t *out)
{
    NEED_INIT();
    *out = 0;
    if (!g.digest_sum) CK(cudaMalloc((void **)&g.digest_sum, sizeof *g.digest_sum), "cudaMalloc(digest)");
    CK(cudaMemset(g.digest_sum, 0, sizeof *g.digest_sum), "cudaMemset(digest)");
    if (bytes) {
        const size_t words = (bytes + 7) / 8;
        size_t blocks = (words + 255) / 256;
        if (blocks > 4096) blocks = 4096;
        const int aligned = ((uintptr_t)dptr % 8) == 0;
        kl_rt_digest_kernel<<<(unsigned)blocks, 256>>>((const unsigned char *)dptr, bytes, aligned, g.digest_sum);
        CK(cudaGetLastError(), "launching the digest kernel");
    }
    unsigned long long sum = 0;
    CK(cudaMemcpy(&sum, g.digest_sum, sizeof sum, cudaMemcpyDeviceToHost), "cudaMemcpy(digest)");
    *out = (uint64_t)(sum ^ (0xA0761D6478BD642Full * (unsigned long long)bytes));
    return KL_RT_OK;
}

extern "C" int kl_rt_host_alloc(void **ptr, size_t bytes)
{
    NEED_INIT();
    *ptr = NULL;
    cudaError_t e = cudaMallocHost(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "cudaMallocHost(%zu bytes)", bytes);
        return cuda_fail(e, what);
    }
    return KL_RT_OK;
}

extern "C" int kl_rt_host_free(void *ptr)
{
    NEED_INIT();
    if (!ptr) return KL_RT_OK;
    CK(cudaFreeHost(ptr), "cudaFreeHost");
    return KL_RT_OK;
}

/* ---- streams ---------------------------------------------------------------------------------- */

extern "C" int kl_rt_stream_create(kl_rt_stream *out, int nonblocking)
{
    NEED_INIT();
    cudaStream_t s = NULL;
    CK(cudaStreamCreateWithFlags(&s, nonblocking ? cudaStreamNonBlocking : cudaStreamDefault), "cudaStreamCreate");
    *out = (kl_rt_stream)s;
    return KL_RT_OK;
}

extern "C" int kl_rt_stream_destroy(kl_rt_stream s)
{
    NEED_INIT();
    if (!s) return KL_RT_OK;
    CK(cudaStreamDestroy((cudaStream_t)s), "cudaStreamDestroy");
    return KL_RT_OK;
}

extern "C" int kl_rt_stream_sync(kl_rt_stream s)
{
    NEED_INIT();
    CK(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize(the candidate's stream)");
    return KL_RT_OK;
}

extern "C" int kl_rt_stream_idle(kl_rt_stream s, int *idle)
{
    NEED_INIT();
    cudaError_t e = cudaStreamQuery((cudaStream_t)s);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        *idle = 0;
        return KL_RT_OK;
    }
    CK(e, "cudaStreamQuery");
    *idle = 1;
    return KL_RT_OK;
}

extern "C" int kl_rt_device_sync(void)
{
    NEED_INIT();
    CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return KL_RT_OK;
}

extern "C" int kl_rt_device_idle(int wait_us, int *idle)
{
    NEED_INIT();
    CK(cudaEventRecord(g.ev_idle, 0), "cudaEventRecord(legacy stream)");
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        cudaError_t e = cudaEventQuery(g.ev_idle);
        if (e == cudaSuccess) {
            *idle = 1;
            return KL_RT_OK;
        }
        if (e != cudaErrorNotReady) CK(e, "cudaEventQuery");
        (void)cudaGetLastError();
        clock_gettime(CLOCK_MONOTONIC, &t);
        double us = (double)(t.tv_sec - t0.tv_sec) * 1e6 + (double)(t.tv_nsec - t0.tv_nsec) * 1e-3;
        if (us > (double)wait_us) break;
    }
    *idle = 0;
    return KL_RT_OK;
}

extern "C" int kl_rt_check(void)
{
    NEED_INIT();
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(e, "after the launch");
    return KL_RT_OK;
}

/* ---- timing: CUPTI activity records, or events ------------------------------------------------ */

#define CUPTI_BUF_BYTES ((size_t)8 << 20)
/* How long kl_rt_batch_end waits for CUPTI to complete the batch's records (non-forced
 * flushes) before it forces a flush, which hands over incomplete records as they are. */
#define COMPLETE_WAIT_TRIES 200
#define COMPLETE_WAIT_US 500

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CUPTI's own clock for its records: CLOCK_MONOTONIC_RAW, which NTP never slews or steps (its
 * default on Linux is CLOCK_REALTIME; the GPU's timestamps are interpolated into it). */
static uint64_t CUPTIAPI cupti_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = (uint8_t *)aligned_alloc(8, CUPTI_BUF_BYTES);
    *size = *buffer ? CUPTI_BUF_BYTES : 0;
    *max_records = 0;
}

/* With g_mu held. */
static void add_record(uint64_t start, uint64_t end, int kind)
{
    if (start == 0 || end == 0 || end < start) { /* CUPTI_TIMESTAMP_UNKNOWN: handed over incomplete */
        g.incomplete++;
        return;
    }
    if (g.nrecs == g.caprecs) {
        size_t cap = g.caprecs ? 2 * g.caprecs : 1024;
        rt_record *r = (rt_record *)realloc(g.recs, cap * sizeof *r);
        if (!r) {
            g.rec_oom = 1;
            return;
        }
        g.recs = r;
        g.caprecs = cap;
    }
    g.recs[g.nrecs].start = start;
    g.recs[g.nrecs].end = end;
    g.recs[g.nrecs].kind = kind;
    g.nrecs++;
    if (kind == REC_MARK) g.markers_seen++;
}

/* A marker: our kernel, on our stream (a candidate naming a kernel the same does not make it one). */
static int is_marker(const CUpti_ActivityKernel10 *k)
{
    if (g.mark_stream_known && k->streamId != g.mark_stream_id) return 0;
    return k->name && strstr(k->name, "kl_rt_window_mark") != NULL;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size, size_t valid)
{
    (void)size;
    pthread_mutex_lock(&g_mu);
    CUpti_Activity *rec = NULL;
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            add_record(k->start, k->end, is_marker(k) ? REC_MARK : REC_KERNEL);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            bool host = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD || m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ||
                        m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOA || m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_ATOH ||
                        m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
            add_record(m->start, m->end, host ? REC_HOSTCOPY : REC_COPY);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            add_record(m->start, m->end, REC_COPY);
            break;
        }
        default:
            break;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS) g.dropped += dropped;
    pthread_mutex_unlock(&g_mu);
    free(buffer);
}

static int cupti_fail(CUptiResult r, const char *what)
{
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
    set_err("", "%s: %s", what, s);
    return KL_RT_ERR_CUDA;
}

static int cupti_start(void)
{
    /* before any kind is enabled, so that every record uses it; CUPTI's default when refused */
    (void)cuptiActivityRegisterTimestampCallback(cupti_clock);
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) return cupti_fail(r, "cuptiActivityRegisterCallbacks");
    g.cupti_registered = 1;
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMSET};
    for (unsigned i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        r = cuptiActivityEnable(kinds[i]);
        if (r != CUPTI_SUCCESS) {
            for (unsigned j = 0; j < i; j++) cuptiActivityDisable(kinds[j]);
            return cupti_fail(r, "cuptiActivityEnable");
        }
    }
    /* the markers' stream as CUPTI names it; without it markers are known by name alone */
    g.mark_stream_known = cuptiGetStreamIdEx(NULL, (CUstream)g.mark, 0, &g.mark_stream_id) == CUPTI_SUCCESS;
    return KL_RT_OK;
}

extern "C" int kl_rt_timer_init(int want_cupti, int *timer)
{
    NEED_INIT();
    if (g.timer == KL_RT_TIMER_NONE) {
        g.timer = KL_RT_TIMER_EVENTS;
        if (want_cupti && cupti_start() == KL_RT_OK) {
            g.timer = KL_RT_TIMER_CUPTI;
            /* one window now, so that CUPTI's own setup (its worker thread, buffers) is
             * done before anything is measured or counted */
            float *tmp = NULL;
            CK(cudaMalloc(&tmp, 256 * sizeof(float)), "cudaMalloc(timer warm-up)");
            int rc = kl_rt_timer_begin();
            if (rc == KL_RT_OK) {
                kl_rt_fma_kernel<<<1, 256>>>(tmp, 1, 1.0f, 0.0f);
                kl_rt_timing t;
                rc = kl_rt_timer_end(&t);
                if (rc == KL_RT_OK && (t.kernels == 0 || !t.marked)) {
                    set_err("", "CUPTI delivered no activity record for a kernel%s; using CUDA events",
                            t.marked ? "" : " (nor the window's markers)");
                    g.timer = KL_RT_TIMER_EVENTS;
                }
            }
            cudaFree(tmp);
            if (rc != KL_RT_OK) return rc;
        }
    }
    *timer = g.timer;
    return KL_RT_OK;
}

extern "C" uint64_t kl_rt_now_ns(void)
{
    uint64_t t = 0;
    if (g.timer == KL_RT_TIMER_CUPTI && cuptiGetTimestamp(&t) == CUPTI_SUCCESS) return t;
    return mono_ns();
}

static int cmp_rec(const void *a, const void *b)
{
    const rt_record *x = (const rt_record *)a, *y = (const rt_record *)b;
    return (x->start > y->start) - (x->start < y->start);
}

/* The union of the intervals of the work records among r[0..n) (sorted by start; markers left
 * out), their plain sum, the last ends, the kernels. */
/* The union of the intervals of r[0..n)'s records of the kinds in `kinds` (a bit per REC_*). */
static uint64_t busy_of(const rt_record *r, size_t n, unsigned kinds)
{
    uint64_t busy = 0, cur_s = 0, cur_e = 0;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (!(kinds & (1u << r[i].kind))) continue;
        if (!any || r[i].start > cur_e) {
            busy += cur_e - cur_s;
            cur_s = r[i].start;
            cur_e = r[i].end;
        } else if (r[i].end > cur_e) {
            cur_e = r[i].end;
        }
        any = true;
    }
    return busy + (cur_e - cur_s);
}

static void measure_records(const rt_record *r, size_t n, kl_rt_timing *out)
{
    uint64_t busy = 0, sum = 0, cur_s = 0, cur_e = 0;
    unsigned used = 0;
    out->device_ms = (double)busy_of(r, n, (1u << REC_KERNEL) | (1u << REC_COPY)) * 1e-6;
    for (size_t i = 0; i < n; i++) {
        const rt_record *x = &r[i];
        if (x->kind == REC_MARK) continue;
        sum += x->end - x->start;
        if (used == 0 || x->start > cur_e) {
            busy += cur_e - cur_s;
            cur_s = x->start;
            cur_e = x->end;
        } else if (x->end > cur_e) {
            cur_e = x->end;
        }
        if (used == 0) out->first_start_ns = x->start;
        used++;
        if (x->end > out->last_end_ns) out->last_end_ns = x->end;
        if (x->kind == REC_KERNEL) {
            out->kernels++;
            if (x->end > out->last_kernel_end_ns) out->last_kernel_end_ns = x->end;
        }
    }
    busy += cur_e - cur_s;
    out->records = used;
    out->ms = (double)busy * 1e-6;
    out->sum_ms = (double)sum * 1e-6;
}

/* With g_mu held: KL_RT_OK, or an error when CUPTI dropped records (the time would be short). */
static int records_lost(void)
{
    if (!g.dropped && !g.rec_oom) return KL_RT_OK;
    set_err("", "CUPTI lost %zu activity records%s; the time would be too short", g.dropped,
            g.rec_oom ? " (out of host memory)" : "");
    return KL_RT_ERR_CUDA;
}

/* Launch one marker on the markers' stream. */
static int launch_marker(void)
{
    kl_rt_window_mark<<<1, 1, 0, g.mark>>>();
    CK(cudaGetLastError(), "launching a window marker");
    return KL_RT_OK;
}

extern "C" int kl_rt_batch_begin(unsigned max_windows)
{
    NEED_INIT();
    if (g.timer == KL_RT_TIMER_NONE) {
        set_err("", "kl_rt_batch_begin before kl_rt_timer_init");
        return KL_RT_ERR_INVALID;
    }
    if (max_windows == 0) {
        set_err("", "kl_rt_batch_begin: a batch needs room for at least one window");
        return KL_RT_ERR_INVALID;
    }
    if (max_windows > g.win_cap) {
        uint64_t *b = (uint64_t *)realloc(g.host_begin, max_windows * sizeof *b);
        if (b) g.host_begin = b;
        uint64_t *e = b ? (uint64_t *)realloc(g.host_end, max_windows * sizeof *e) : NULL;
        if (e) g.host_end = e;
        unsigned *m = e ? (unsigned *)realloc(g.win_marks, max_windows * sizeof *m) : NULL;
        if (m) g.win_marks = m;
        if (!b || !e || !m) {
            set_err("", "out of host memory for %u timing windows", max_windows);
            return KL_RT_ERR_NOMEM;
        }
        g.win_cap = max_windows;
    }
    if (g.timer == KL_RT_TIMER_EVENTS && 2 * max_windows > g.bev_n) {
        cudaEvent_t *ev = (cudaEvent_t *)realloc(g.bev, 2 * (size_t)max_windows * sizeof *ev);
        if (!ev) {
            set_err("", "out of host memory for %u timing windows", max_windows);
            return KL_RT_ERR_NOMEM;
        }
        g.bev = ev;
        while (g.bev_n < 2 * max_windows) {
            CK(cudaEventCreate(&g.bev[g.bev_n]), "cudaEventCreate (timing window)");
            g.bev_n++;
        }
    }
    CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize (batch start)");
    if (g.timer == KL_RT_TIMER_CUPTI) {
        /* everything recorded so far is handed over (incomplete or not) and dropped */
        CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        if (r != CUPTI_SUCCESS) return cupti_fail(r, "cuptiActivityFlushAll");
        pthread_mutex_lock(&g_mu);
        g.nrecs = 0;
        g.dropped = g.incomplete = 0;
        g.markers_seen = 0;
        g.rec_oom = 0;
        pthread_mutex_unlock(&g_mu);
    }
    g.batch_max = max_windows;
    g.batch_n = 0;
    g.batch_on = 1;
    g.window_on = 0;
    return KL_RT_OK;
}

extern "C" int kl_rt_batch_open(void)
{
    NEED_INIT();
    if (!g.batch_on || g.window_on || g.batch_n >= g.batch_max) {
        set_err("", "kl_rt_batch_open: %s", !g.batch_on ? "no batch was begun" : g.window_on ? "a window is already open"
                                                                                           : "the batch is full");
        return KL_RT_ERR_INVALID;
    }
    CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize (window start)");
    if (g.timer == KL_RT_TIMER_CUPTI) {
        /* the opening marker, waited for: all the window's work starts after it ends */
        int rc = launch_marker();
        if (rc != KL_RT_OK) return rc;
        CK(cudaStreamSynchronize(g.mark), "cudaStreamSynchronize (window marker)");
    } else {
        CK(cudaEventRecord(g.bev[2 * g.batch_n], 0), "cudaEventRecord (window start)");
    }
    g.win_marks[g.batch_n] = 0;
    g.host_begin[g.batch_n] = mono_ns();
    g.window_on = 1;
    return KL_RT_OK;
}

extern "C" int kl_rt_mark(void)
{
    NEED_INIT();
    if (!g.batch_on || !g.window_on) {
        set_err("", "kl_rt_mark: no window is open");
        return KL_RT_ERR_INVALID;
    }
    if (g.timer != KL_RT_TIMER_CUPTI) return KL_RT_OK;
    int rc = launch_marker();
    if (rc == KL_RT_OK) g.win_marks[g.batch_n]++;
    return rc;
}

extern "C" int kl_rt_batch_close(void)
{
    NEED_INIT();
    if (!g.batch_on || !g.window_on) {
        set_err("", "kl_rt_batch_close: no window is open");
        return KL_RT_ERR_INVALID;
    }
    if (g.timer == KL_RT_TIMER_EVENTS) CK(cudaEventRecord(g.bev[2 * g.batch_n + 1], 0), "cudaEventRecord (window end)");
    CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize (window end)");
    g.host_end[g.batch_n] = mono_ns();
    if (g.timer == KL_RT_TIMER_CUPTI) {
        /* the closing marker starts after all the window's work ended (the device is idle) */
        int rc = launch_marker();
        if (rc != KL_RT_OK) return rc;
    }
    g.window_on = 0;
    g.batch_n++;
    return KL_RT_OK;
}

/* With g_mu held, records sorted: each window's records by its markers. A window is `marked`
 * only when the markers delivered are exactly the ones launched; otherwise none is. */
static void attribute_windows(kl_rt_timing *out, unsigned nw)
{
    size_t want = 0;
    for (unsigned i = 0; i < nw; i++) want += 2 + g.win_marks[i];
    size_t nmarks = 0;
    for (size_t k = 0; k < g.nrecs; k++)
        if (g.recs[k].kind == REC_MARK) nmarks++;
    if (nmarks != want) return; /* lost or extra markers: no window can be trusted */
    size_t k = 0;
    for (unsigned i = 0; i < nw; i++) {
        /* the opening marker */
        while (k < g.nrecs && g.recs[k].kind != REC_MARK) k++;
        if (k >= g.nrecs) return;
        size_t first = k + 1;
        k++;
        /* the window's own marks, then the closing marker */
        unsigned marks = 0;
        size_t close = g.nrecs;
        for (; k < g.nrecs; k++) {
            if (g.recs[k].kind != REC_MARK) continue;
            if (marks == g.win_marks[i]) {
                close = k;
                break;
            }
            if (marks == 0) out[i].mark_ns = g.recs[k].start;
            marks++;
        }
        if (close >= g.nrecs) return;
        measure_records(g.recs + first, close - first, &out[i]);
        out[i].marked = 1;
        k = close + 1;
    }
}

extern "C" int kl_rt_batch_end(kl_rt_timing *out, unsigned *n)
{
    NEED_INIT();
    *n = 0;
    if (!g.batch_on || g.window_on) {
        set_err("", "kl_rt_batch_end: %s", !g.batch_on ? "no batch was begun" : "a window is still open");
        return KL_RT_ERR_INVALID;
    }
    g.batch_on = 0;
    unsigned nw = g.batch_n;
    for (unsigned i = 0; i < nw; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].timer = g.timer;
        out[i].host_ms = (double)(g.host_end[i] - g.host_begin[i]) * 1e-6;
    }
    CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize (batch end)");
    if (g.timer == KL_RT_TIMER_EVENTS) {
        for (unsigned i = 0; i < nw; i++) {
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, g.bev[2 * i], g.bev[2 * i + 1]), "cudaEventElapsedTime");
            out[i].ms = ms;
            out[i].sum_ms = ms;
            out[i].device_ms = ms;
        }
        *n = nw;
        return KL_RT_OK;
    }
    /* The device is idle, but CUPTI completes its records on its own time: flushes that hand
     * over only complete buffers until every marker launched has come back, and a forced
     * flush only then (it hands over incomplete records too, without their timestamps: a
     * window whose kernel arrived so would look empty). */
    size_t want = 0;
    for (unsigned i = 0; i < nw; i++) want += 2 + g.win_marks[i];
    for (unsigned tries = 0; tries < COMPLETE_WAIT_TRIES; tries++) {
        CUptiResult r = cuptiActivityFlushAll(0);
        if (r != CUPTI_SUCCESS) return cupti_fail(r, "cuptiActivityFlushAll");
        pthread_mutex_lock(&g_mu);
        size_t seen = g.markers_seen;
        pthread_mutex_unlock(&g_mu);
        if (seen >= want) break;
        struct timespec ts = {0, COMPLETE_WAIT_US * 1000L};
        nanosleep(&ts, NULL);
    }
    CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (r != CUPTI_SUCCESS) return cupti_fail(r, "cuptiActivityFlushAll");
    pthread_mutex_lock(&g_mu);
    int rc = records_lost();
    if (rc == KL_RT_OK) {
        qsort(g.recs, g.nrecs, sizeof *g.recs, cmp_rec);
        attribute_windows(out, nw);
        for (unsigned i = 0; i < nw; i++) out[i].incomplete = (unsigned)g.incomplete;
        *n = nw;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* A single window: a batch of one. */
extern "C" int kl_rt_timer_begin(void)
{
    NEED_INIT();
    if (g.timer == KL_RT_TIMER_NONE) {
        set_err("", "kl_rt_timer_begin before kl_rt_timer_init");
        return KL_RT_ERR_INVALID;
    }
    int rc = kl_rt_batch_begin(1);
    return rc == KL_RT_OK ? kl_rt_batch_open() : rc;
}

extern "C" int kl_rt_timer_end(kl_rt_timing *out)
{
    NEED_INIT();
    memset(out, 0, sizeof *out);
    out->timer = g.timer;
    if (g.timer == KL_RT_TIMER_NONE) {
        set_err("", "kl_rt_timer_end before kl_rt_timer_init");
        return KL_RT_ERR_INVALID;
    }
    int rc = kl_rt_batch_close();
    if (rc != KL_RT_OK) return rc;
    unsigned n = 0;
    kl_rt_timing t[1];
    rc = kl_rt_batch_end(t, &n);
    if (rc == KL_RT_OK && n == 1) *out = t[0];
    return rc;
}

extern "C" int kl_rt_smem_poison(int byte)
{
    NEED_INIT();
    if (!g.smem_poison_ready) {
        int optin = 0;
        CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, g.ordinal),
           "cudaDeviceGetAttribute(shared memory per block)");
        if (optin <= 0) optin = 48 << 10;
        CK(cudaFuncSetAttribute(kl_rt_smem_fill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
           "cudaFuncSetAttribute(the shared memory poison kernel)");
        CK(cudaFuncSetAttribute(kl_rt_smem_fill_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100),
           "cudaFuncSetAttribute(shared memory carveout)");
        g.smem_bytes = optin;
        g.smem_poison_ready = 1;
    }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g.ordinal), "cudaDeviceGetAttribute(SMs)");
    unsigned char b = (unsigned char)byte;
    unsigned pattern = (unsigned)b * 0x01010101u;
    kl_rt_smem_fill_kernel<<<2 * (sms > 0 ? sms : 1), 1024, (size_t)g.smem_bytes>>>((unsigned)g.smem_bytes / 4, pattern);
    CK(cudaGetLastError(), "launching the shared memory poison kernel");
    CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize after poisoning shared memory");
    return KL_RT_OK;
}

extern "C" int kl_rt_l2_flush(void)
{
    NEED_INIT();
    size_t n = g.flush_bytes / sizeof(int4);
    kl_rt_flush_kernel<<<1024, 256>>>((int4 *)g.flush_buf, n, (int)(++g.flush_count & 0x7fffffff));
    CK(cudaGetLastError(), "launching the L2 flush kernel");
    return KL_RT_OK;
}

/* ---- ceilings ------------------------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median_of(float *v, unsigned n)
{
    qsort(v, n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

extern "C" int kl_rt_ceilings_measure(unsigned reps, kl_rt_ceilings *out)
{
    NEED_INIT();
    memset(out, 0, sizeof *out);
    if (reps < 1) reps = 1;
    float *ms = (float *)calloc(reps, sizeof *ms);
    if (!ms) {
        set_err("", "out of host memory");
        return KL_RT_ERR_NOMEM;
    }
    cudaDeviceProp p;
    void *a = NULL, *b = NULL;
    float *sink = NULL;
    cudaStream_t s = NULL;
    int rc = KL_RT_OK;
    cudaError_t e;
#define CKC(call, what)                                                                            \
    do {                                                                                           \
        e = (call);                                                                                \
        if (e != cudaSuccess) {                                                                    \
            rc = cuda_fail(e, what);                                                               \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
    CKC(cudaGetDeviceProperties(&p, g.ordinal), "cudaGetDeviceProperties");
    CKC(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    {
        /* copy: far larger than L2, read + write counted */
        size_t bytes = (size_t)8 * (size_t)p.l2CacheSize;
        if (bytes < ((size_t)256 << 20)) bytes = (size_t)256 << 20;
        CKC(cudaMalloc(&a, bytes), "cudaMalloc(copy source)");
        CKC(cudaMalloc(&b, bytes), "cudaMalloc(copy destination)");
        CKC(cudaMemsetAsync(a, 0x3c, bytes, s), "cudaMemsetAsync");
        for (unsigned i = 0; i < reps + 2; i++) {
            CKC(cudaEventRecord(g.ev0, s), "cudaEventRecord");
            CKC(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync device to device");
            CKC(cudaEventRecord(g.ev1, s), "cudaEventRecord");
            CKC(cudaEventSynchronize(g.ev1), "cudaEventSynchronize");
            if (i >= 2) CKC(cudaEventElapsedTime(&ms[i - 2], g.ev0, g.ev1), "cudaEventElapsedTime");
        }
        float m = median_of(ms, reps);
        out->copy_bytes = bytes;
        out->copy_gbs = m > 0 ? 2.0 * (double)bytes / ((double)m * 1e-3) / 1e9 : 0;
    }
    {
        int blocks = p.multiProcessorCount * 8, threads = 256, iters = 2048;
        CKC(cudaMalloc(&sink, (size_t)blocks * threads * sizeof(float)), "cudaMalloc(ceiling output)");
        for (unsigned i = 0; i < reps + 2; i++) {
            CKC(cudaEventRecord(g.ev0, s), "cudaEventRecord");
            kl_rt_fma_kernel<<<blocks, threads, 0, s>>>(sink, iters, 0.999f, 0.001f);
            CKC(cudaGetLastError(), "launching the FMA ceiling kernel");
            CKC(cudaEventRecord(g.ev1, s), "cudaEventRecord");
            CKC(cudaEventSynchronize(g.ev1), "cudaEventSynchronize");
            if (i >= 2) CKC(cudaEventElapsedTime(&ms[i - 2], g.ev0, g.ev1), "cudaEventElapsedTime");
        }
        float m = median_of(ms, reps);
        double flops = 2.0 * FMA_CHAINS * FMA_UNROLL * (double)iters * blocks * threads;
        out->fma_tflops = m > 0 ? flops / ((double)m * 1e-3) / 1e12 : 0;
    }
    if (p.major >= 8) {
        int blocks = p.multiProcessorCount * 4, threads = 256, iters = 4096;
        for (unsigned i = 0; i < reps + 2; i++) {
            CKC(cudaEventRecord(g.ev0, s), "cudaEventRecord");
            kl_rt_mma_kernel<<<blocks, threads, 0, s>>>(sink, iters);
            CKC(cudaGetLastError(), "launching the tensor ceiling kernel");
            CKC(cudaEventRecord(g.ev1, s), "cudaEventRecord");
            CKC(cudaEventSynchronize(g.ev1), "cudaEventSynchronize");
            if (i >= 2) CKC(cudaEventElapsedTime(&ms[i - 2], g.ev0, g.ev1), "cudaEventElapsedTime");
        }
        float m = median_of(ms, reps);
        double warps = (double)blocks * threads / 32.0;
        double flops = warps * iters * MMA_ACC * (2.0 * 16 * 8 * 16);
        out->tensor_tflops = m > 0 ? flops / ((double)m * 1e-3) / 1e12 : 0;
    }
    out->reps = reps;
done:; /* an empty statement: a label directly before a directive is not C++ before C++23 */
#undef CKC
    if (s) cudaStreamDestroy(s);
    cudaFree(a);
    cudaFree(b);
    cudaFree(sink);
    free(ms);
    return rc;
}

/* ---- cuBLAS, loaded on demand ---------------------------------------------------------------- */

static void cublas_unload(void)
{
    if (g.cublas && g.cb_destroy) g.cb_destroy(g.cublas);
    g.cublas = NULL;
    if (g.cublas_lib) dlclose(g.cublas_lib);
    g.cublas_lib = NULL;
    g.cublas_tried = 0;
}

static int cublas_load(void)
{
    if (g.cublas) return KL_RT_OK;
    if (g.cublas_tried) {
        set_err("", "cuBLAS is not available");
        return KL_RT_ERR_UNAVAILABLE;
    }
    g.cublas_tried = 1;
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                                        KL_RT_CUDA_LIB64 "/libcublas.so"};
    char tried[512] = "";
    for (unsigned i = 0; i < sizeof names / sizeof names[0] && !g.cublas_lib; i++) {
        g.cublas_lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!g.cublas_lib) {
            size_t len = strlen(tried);
            snprintf(tried + len, sizeof tried - len, "%s%s", len ? ", " : "", names[i]);
        }
    }
    if (!g.cublas_lib) {
        set_err("", "cuBLAS could not be loaded (tried %s)", tried);
        return KL_RT_ERR_UNAVAILABLE;
    }
    g.cb_create = (cublas_create_fn)dlsym(g.cublas_lib, "cublasCreate_v2");
    g.cb_destroy = (cublas_destroy_fn)dlsym(g.cublas_lib, "cublasDestroy_v2");
    g.cb_set_stream = (cublas_set_stream_fn)dlsym(g.cublas_lib, "cublasSetStream_v2");
    g.cb_set_math = (cublas_set_math_fn)dlsym(g.cublas_lib, "cublasSetMathMode");
    g.cb_sgemm = (cublas_sgemm_fn)dlsym(g.cublas_lib, "cublasSgemm_v2");
    g.cb_gemmex = (cublas_gemmex_fn)dlsym(g.cublas_lib, "cublasGemmEx");
    if (!g.cb_create || !g.cb_destroy || !g.cb_set_stream || !g.cb_set_math || !g.cb_sgemm || !g.cb_gemmex) {
        set_err("", "cuBLAS lacks an expected symbol (cublasCreate_v2, cublasSgemm_v2, cublasGemmEx …)");
        dlclose(g.cublas_lib);
        g.cublas_lib = NULL;
        return KL_RT_ERR_UNAVAILABLE;
    }
    cublasStatus_t st = g.cb_create(&g.cublas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        set_err("", "cublasCreate failed (status %d)", (int)st);
        g.cublas = NULL;
        return KL_RT_ERR_UNAVAILABLE;
    }
    /* no TF32 or other reduced precision: the f32 baseline is a true f32 GEMM */
    st = g.cb_set_math(g.cublas, CUBLAS_DEFAULT_MATH);
    if (st != CUBLAS_STATUS_SUCCESS) {
        set_err("", "cublasSetMathMode failed (status %d)", (int)st);
        return KL_RT_ERR_UNAVAILABLE;
    }
    return KL_RT_OK;
}

extern "C" int kl_rt_cublas_available(void)
{
    if (!g.inited) return 0;
    return cublas_load() == KL_RT_OK;
}

static int cublas_result(cublasStatus_t st, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(e, what);
    if (st != CUBLAS_STATUS_SUCCESS) {
        set_err("", "%s: cuBLAS status %d", what, (int)st);
        return KL_RT_ERR_CUDA;
    }
    return KL_RT_OK;
}

static int gemm_args_ok(int M, int N, int K)
{
    if (M <= 0 || N <= 0 || K <= 0) {
        set_err("", "GEMM sizes must be positive (M=%d N=%d K=%d)", M, N, K);
        return 0;
    }
    return 1;
}

/* Row-major C = A B is column-major C^T = B^T A^T: swap the operands, swap M and N. */
extern "C" int kl_rt_cublas_sgemm(const void *A, const void *B, void *C, int M, int N, int K, kl_rt_stream s)
{
    NEED_INIT();
    if (!gemm_args_ok(M, N, K)) return KL_RT_ERR_INVALID;
    int rc = cublas_load();
    if (rc != KL_RT_OK) return rc;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = g.cb_set_stream(g.cublas, (cudaStream_t)s);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = g.cb_sgemm(g.cublas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, (const float *)B, N, (const float *)A, K,
                        &zero, (float *)C, N);
    return cublas_result(st, "cublasSgemm");
}

extern "C" int kl_rt_cublas_bf16gemm(const void *A, const void *B, void *C, int c_is_f32, int M, int N, int K,
                                     kl_rt_stream s)
{
    NEED_INIT();
    if (!gemm_args_ok(M, N, K)) return KL_RT_ERR_INVALID;
    int rc = cublas_load();
    if (rc != KL_RT_OK) return rc;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = g.cb_set_stream(g.cublas, (cudaStream_t)s);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = g.cb_gemmex(g.cublas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, N, A, CUDA_R_16BF, K,
                         &zero, C, c_is_f32 ? CUDA_R_32F : CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return cublas_result(st, "cublasGemmEx (bf16, f32 accumulate)");
}
