/*
 * The device runtime's C ABI (kl_rt_*): what the worker needs from CUDA, in one shared
 * object built from runtime.cu by nvcc on the machine that runs the kernels
 * (kl_runtime_build). The worker dlopen()s it and never includes a CUDA header; CUDA
 * types cross this line as opaque pointers.
 *
 * This header is embedded beside runtime.cu and compiled with it; it is shared with the
 * worker and nothing else. It must stay plain C (no CUDA types).
 *
 * Conventions: every function returns KL_RT_OK (0) or a KL_RT_ERR_* code; on failure
 * kl_rt_error() describes it ("cudaMalloc(268435456 bytes): out of memory") and
 * kl_rt_error_name() gives the CUDA error's name ("cudaErrorMemoryAllocation"). State is
 * per process (one device, one context); the functions are not thread-safe.
 */
#ifndef KL_GATE_RUNTIME_H
#define KL_GATE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KL_RT_ABI 4 /* kl_rt_abi() returns this; bump on any change below */

enum {
    KL_RT_OK = 0,
    KL_RT_ERR_CUDA = 1,        /* a CUDA call failed; the context is still usable */
    KL_RT_ERR_STICKY = 2,      /* a sticky CUDA error: the context is lost, nothing further can run */
    KL_RT_ERR_NO_DEVICE = 3,   /* no driver or no device */
    KL_RT_ERR_UNAVAILABLE = 4, /* a library (cuBLAS) is not present */
    KL_RT_ERR_INVALID = 5,     /* a bad argument, or called before kl_rt_init */
    KL_RT_ERR_NOMEM = 6        /* host memory */
};

/* A cudaStream_t, opaque here. */
typedef struct kl_rt_stream_opaque *kl_rt_stream;

typedef struct kl_rt_device {
    char name[256];
    int ordinal;
    int cc_major, cc_minor;
    int sms;
    int l2_bytes;
    uint64_t mem_bytes;
    int clock_khz;             /* SM clock (cudaDevAttrClockRate), 0 when not reported */
    int mem_clock_khz;         /* memory clock, 0 when not reported */
    int mem_bus_bits;
    int driver_version;        /* cudaDriverGetVersion: 13000 = 13.0 */
    int runtime_version;       /* cudaRuntimeGetVersion */
    int smem_per_block_optin;  /* bytes */
    int regs_per_sm;
} kl_rt_device;

enum { KL_RT_TIMER_NONE = 0, KL_RT_TIMER_CUPTI = 1, KL_RT_TIMER_EVENTS = 2 };

/* One timed window (kl_rt_timer_begin .. kl_rt_timer_end, or a batch's window). */
typedef struct kl_rt_timing {
    double ms;                 /* CUPTI: the union of the intervals of every kernel, memcpy and memset
                                  on any stream in the window (concurrent work counted once);
                                  events: elapsed between two events on the legacy stream */
    int timer;                 /* KL_RT_TIMER_* that produced ms */
    unsigned records;          /* CUPTI: activity records attributed to the window (0 with events) */
    uint64_t first_start_ns;   /* CUPTI timestamps of the window's first start and last end (0 with events) */
    uint64_t last_end_ns;
    uint64_t last_kernel_end_ns; /* CUPTI: the last end of a kernel record (0 with events) */
    double sum_ms;             /* CUPTI: plain sum of the durations (>= ms when work overlapped) */
    unsigned kernels;          /* CUPTI: kernel records in the window (copies, memsets and markers are not) */
    unsigned incomplete;       /* CUPTI: records of the whole batch CUPTI delivered without timestamps */
    int marked;                /* CUPTI: the window's bracketing markers were delivered, so its records
                                  are attributed by the GPU's own clock (0: attribution failed) */
    double host_ms;            /* the window's wall time on the host (CLOCK_MONOTONIC), from just after
                                  it opened (device idle) to just after it closed (device idle again) */
    uint64_t mark_ns;          /* CUPTI: start of the first kl_rt_mark() marker in the window; 0: none */
    double device_ms;          /* CUPTI: like ms, without the copies to or from the host (kernels,
                                  device copies, memsets: the work the task is done by) */
} kl_rt_timing;

typedef struct kl_rt_ceilings {
    double copy_gbs;           /* device-to-device copy, bytes read + written per second / 1e9 */
    double fma_tflops;         /* f32 FMA chain kernel, 2 flops per FMA */
    double tensor_tflops;      /* bf16 mma.sync m16n8k16 with f32 accumulate */
    unsigned reps;             /* each figure is the median of this many timed runs */
    uint64_t copy_bytes;       /* size of one copy */
} kl_rt_ceilings;

/* ---- lifetime and device -------------------------------------------------------------- */
int kl_rt_abi(void);
/* Select device `ordinal`, create the context, the readback stream and the L2 flush
 * buffer. KL_RT_ERR_NO_DEVICE when there is no driver or no device. */
int kl_rt_init(int ordinal);
/* Release everything kl_rt_init and later calls made (cuBLAS handle, CUPTI, buffers). */
void kl_rt_fini(void);
const char *kl_rt_error(void);        /* the last failure, "" when none; static storage */
const char *kl_rt_error_name(void);   /* "cudaErrorIllegalAddress", "" when none */
int kl_rt_device_info(kl_rt_device *out);

/* ---- memory (device pointers are plain void*) ------------------------------------------- */
int kl_rt_malloc(void **ptr, size_t bytes);
int kl_rt_free(void *ptr);                                          /* NULL is fine */
int kl_rt_memset(void *dptr, int byte, size_t bytes);              /* synchronous */
int kl_rt_h2d(void *dst, const void *src, size_t bytes);            /* synchronous */
/* Device to host on the runtime's own non-blocking readback stream: it waits for nothing
 * but itself, so it reads what the device holds now (used after a stream-only sync). */
int kl_rt_d2h(void *dst, const void *src, size_t bytes);
int kl_rt_d2d(void *dst, const void *src, size_t bytes);            /* synchronous */
/* A 64-bit digest of `bytes` bytes of device memory at dptr (any alignment), computed on the
 * device (legacy stream, synchronous): a sum over 8-byte words of a mix of the word and its
 * index, and the length. Equal contents give equal digests; a change anywhere changes it with
 * probability 1 - 2^-64. What the integrity check compares instead of reading inputs back. */
int kl_rt_digest(const void *dptr, size_t bytes, uint64_t *out);
/* Page-locked host memory (cudaMallocHost): readbacks into it run at the bus's speed. */
int kl_rt_host_alloc(void **ptr, size_t bytes);
int kl_rt_host_free(void *ptr);                                     /* NULL is fine */

/* ---- streams and synchronization --------------------------------------------------------- */
/* A blocking stream (cudaStreamDefault), the kind a candidate is launched on; nonblocking
 * != 0: cudaStreamNonBlocking. */
int kl_rt_stream_create(kl_rt_stream *out, int nonblocking);
int kl_rt_stream_destroy(kl_rt_stream s);
int kl_rt_stream_sync(kl_rt_stream s);
/* *idle = 1 when every operation in s has completed (cudaStreamQuery). */
int kl_rt_stream_idle(kl_rt_stream s, int *idle);
int kl_rt_device_sync(void);
/* Whether the device looks idle now: an event recorded on the legacy default stream (which
 * waits for every blocking stream) completes within wait_us microseconds. *idle 1 or 0. */
int kl_rt_device_idle(int wait_us, int *idle);
/* The launch error of the last kernel, cleared (cudaGetLastError), and whether the
 * context is lost: KL_RT_OK, KL_RT_ERR_CUDA or KL_RT_ERR_STICKY. */
int kl_rt_check(void);

/* ---- timing ----------------------------------------------------------------------------- */
/* Start the timer: want_cupti != 0 tries CUPTI activity records (every kernel, memcpy and
 * memset on every stream); if CUPTI cannot be enabled, CUDA events are used. *timer says
 * which (KL_RT_TIMER_*); kl_rt_error() keeps CUPTI's reason when it fell back. */
int kl_rt_timer_init(int want_cupti, int *timer);
/* Open a window: synchronize the device, drop records collected so far, mark the start. */
int kl_rt_timer_begin(void);
/* Close it: synchronize the device, collect the records, measure. */
int kl_rt_timer_end(kl_rt_timing *out);
/*
 * Batched windows, for many repetitions: CUPTI's buffers are flushed once per batch, not
 * twice per window (a forced flush costs far more than a short kernel).
 * kl_rt_batch_begin(max): synchronize the device, flush and drop what was collected, room for
 * `max` windows. Then, up to `max` times: kl_rt_batch_open() (synchronize the device; CUPTI: an
 * empty marker kernel on the runtime's own stream, waited for; events: an event on the legacy
 * stream), the work, kl_rt_batch_close() (synchronize the device; the closing marker, or event).
 * kl_rt_batch_end(out, &n): collect the records (flushes that wait for complete records, a forced
 * one last) and measure each window as kl_rt_timer_end would. CUPTI records are attributed to a
 * window by the markers around it, all on the GPU's clock: a record belongs to the window whose
 * opening marker started before it and whose closing marker started after it. No host timestamp
 * is compared with a GPU one (the two clocks are only interpolated into each other by CUPTI, and
 * a kernel launched microseconds after the host's mark could be stamped before it). Work between
 * windows (restores, L2 flushes) belongs to none.
 * kl_rt_timer_begin / kl_rt_timer_end are a batch of one window.
 */
int kl_rt_batch_begin(unsigned max_windows);
int kl_rt_batch_open(void);
int kl_rt_batch_close(void);
int kl_rt_batch_end(kl_rt_timing *out, unsigned *n);
/* Inside an open window (CUPTI): an empty marker kernel on the runtime's own non-blocking stream of
 * the highest priority, not waited for: its start is "now" on the GPU's clock (the window's
 * mark_ns), against which the ends of the window's kernels can be compared. Events: nothing. */
int kl_rt_mark(void);
/* A timestamp in the timer's clock (CUPTI's, else CLOCK_MONOTONIC), ns. */
uint64_t kl_rt_now_ns(void);
/* Write a buffer of at least twice the L2 size (asynchronously, legacy stream). */
int kl_rt_l2_flush(void);
/* Fill the shared memory of every SM with `byte` (a kernel taking the most dynamic shared memory
 * a block may have, two blocks per SM; synchronous): what a kernel reads from shared memory it
 * never wrote is then this byte, not what an earlier kernel happened to leave there. */
int kl_rt_smem_poison(int byte);

/* ---- ceilings and vendor baselines ---------------------------------------------------------- */
/* The ceiling kernels for `gpu info`, each timed with events, median of reps (>= 1). */
int kl_rt_ceilings_measure(unsigned reps, kl_rt_ceilings *out);
/* Whether cuBLAS could be loaded (dlopen); 1 or 0. Loads it on first call. */
int kl_rt_cublas_available(void);
/* Row-major C[M][N] = A[M][K] * B[K][N] in f32, no TF32 (CUBLAS_DEFAULT_MATH), on s. */
int kl_rt_cublas_sgemm(const void *A, const void *B, void *C, int M, int N, int K, kl_rt_stream s);
/* The same with bf16 A and B, f32 accumulation, C in f32 (c_is_f32 != 0) or bf16. */
int kl_rt_cublas_bf16gemm(const void *A, const void *B, void *C, int c_is_f32, int M, int N, int K, kl_rt_stream s);

#ifdef __cplusplus
}
#endif
#endif
