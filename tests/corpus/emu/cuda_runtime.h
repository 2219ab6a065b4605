// A CPU emulation of the part of CUDA the corpus kernels use, for testing them without a GPU
// (tests/corpus/emulate.py). Every CUDA thread of a block is a fiber (ucontext); the fibers of a
// block run one at a time, switching only at __syncthreads(), __syncwarp() and the warp
// collectives (shuffles, ballot), so a block's execution is one legal interleaving of its
// threads. Blocks run one after another. Shared memory is a static (one instance, reused by
// each block in turn); device memory is host memory. Atomics are plain read-modify-writes
// (nothing runs concurrently).
//
// What it checks beyond the results: a barrier that some live threads never reach (a divergent
// __syncthreads) is reported as a deadlock; a shuffle that reads a lane that has exited is an
// error; launch configurations outside the device limits are errors (like cudaErrorInvalid
// Configuration). Everything else (memory out of bounds, writes to inputs) is the harness's job.
#ifndef KL_CUDA_EMU_RUNTIME_H
#define KL_CUDA_EMU_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <type_traits>
#include <vector>

// ---- qualifiers --------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __constant__
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __managed__

// ---- vector types ------------------------------------------------------------------------
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct uchar3 { unsigned char x, y, z; };
struct alignas(4) uchar4 { unsigned char x, y, z, w; };
struct alignas(2) uchar2 { unsigned char x, y; };
struct alignas(16) double2 { double x, y; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uchar3 make_uchar3(unsigned char x, unsigned char y, unsigned char z) { return {x, y, z}; }
inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

// ---- the runtime API ---------------------------------------------------------------------
typedef struct CUstream_st* cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidConfiguration = 9, cudaErrorLaunchFailure = 719 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMultiProcessorCount = 16,
                      cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

namespace emu {
constexpr int kSMs = 132;                   // what the emulated device reports (an H200)
constexpr size_t kDefaultDynSmem = 48 * 1024;
constexpr size_t kMaxDynSmem = 227 * 1024;
inline cudaError_t last_error = cudaSuccess;
inline size_t dyn_smem_limit = kDefaultDynSmem;
[[noreturn]] inline void fail(const char* what)
{
    fprintf(stderr, "emu: %s\n", what);
    fflush(stderr);
    exit(3);
}
}  // namespace emu

inline cudaError_t cudaGetLastError() { cudaError_t e = emu::last_error; emu::last_error = cudaSuccess; return e; }
inline cudaError_t cudaPeekAtLastError() { return emu::last_error; }
inline const char* cudaGetErrorString(cudaError_t) { return "emulated CUDA error"; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int)
{
    switch (a) {
    case cudaDevAttrMultiProcessorCount: *v = emu::kSMs; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)emu::kMaxDynSmem; break;
    default: *v = 0; return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t = nullptr) { memset(p, v, n); return cudaSuccess; }
inline cudaError_t cudaMemset(void* p, int v, size_t n) { memset(p, v, n); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t = nullptr)
{
    memmove(d, s, n);
    return cudaSuccess;
}
template <class T>
cudaError_t cudaGetSymbolAddress(void** p, T& symbol) { *p = (void*)&symbol; return cudaSuccess; }
template <class T>
cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* src, size_t n, size_t offset = 0,
                                    cudaMemcpyKind = cudaMemcpyHostToDevice, cudaStream_t = nullptr)
{
    if (offset + n > sizeof(T)) emu::fail("cudaMemcpyToSymbolAsync past the end of the symbol");
    memcpy((char*)&symbol + offset, src, n);
    return cudaSuccess;
}
template <class T>
cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t n, size_t offset = 0,
                               cudaMemcpyKind k = cudaMemcpyHostToDevice)
{
    return cudaMemcpyToSymbolAsync(symbol, src, n, offset, k, nullptr);
}
template <class F>
cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute a, int v)
{
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v < 0 || (size_t)v > emu::kMaxDynSmem) return cudaErrorInvalidValue;
        emu::dyn_smem_limit = (size_t)v;
    }
    return cudaSuccess;
}
template <class F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int threads, size_t)
{
    int b = threads > 0 ? 2048 / threads : 1;
    *n = b < 1 ? 1 : (b > 32 ? 32 : b);
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

// ---- the execution model -----------------------------------------------------------------
inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
constexpr int warpSize = 32;

namespace emu {
struct Fiber {
#if defined(__x86_64__)
    void* sp;
#else
    ucontext_t ctx;
#endif
    uint3 tid;
    bool done = false, blocked = false;
    unsigned warp_gen_wait = 0;
};

struct Block {
    std::vector<Fiber> fibers;
    std::vector<char*> stacks;
    size_t stack_size = 256 * 1024;
    ucontext_t sched;
    int current = -1;
    int live = 0;                  // fibers not done
    int arrived = 0;               // at the block barrier
    std::vector<int> warp_live, warp_arrived;
    std::vector<unsigned long long> slots;  // one per thread: shuffle values
    std::vector<unsigned char> slot_live;
    const std::function<void()>* body = nullptr;
    std::vector<char> dyn_smem;
#if defined(__x86_64__)
    void* sched_sp = nullptr;
#endif
};
inline Block blk;

#if defined(__x86_64__)
// A minimal context switch: push the callee-saved registers, swap stacks, pop them. The x87 and
// SSE control words are never changed by the kernels, so they are not saved.
extern "C" void emu_switch(void** save_sp, void* new_sp);
asm(R"(
    .text
    .weak emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
    .section .note.GNU-stack,"",@progbits
    .text
)");
#endif

inline void switch_to_scheduler()
{
    Fiber& f = blk.fibers[blk.current];
#if defined(__x86_64__)
    emu_switch(&f.sp, blk.sched_sp);
#else
    swapcontext(&f.ctx, &blk.sched);
#endif
    threadIdx = blk.fibers[blk.current].tid;
}

inline int flat_tid() { return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); }

// Release the block barrier when every live fiber has arrived.
inline void try_release_block()
{
    if (blk.arrived > 0 && blk.arrived == blk.live) {
        blk.arrived = 0;
        for (auto& f : blk.fibers)
            if (!f.done && f.blocked && f.warp_gen_wait == 0) f.blocked = false;
    }
}

inline void syncthreads()
{
    Fiber& f = blk.fibers[blk.current];
    blk.arrived++;
    f.blocked = true;
    f.warp_gen_wait = 0;
    try_release_block();
    if (f.blocked) switch_to_scheduler();
}

// Warp barrier: every live lane of this fiber's warp arrives. warp_gen_wait marks a warp wait.
inline void try_release_warp(int w)
{
    if (blk.warp_arrived[w] > 0 && blk.warp_arrived[w] == blk.warp_live[w]) {
        blk.warp_arrived[w] = 0;
        for (size_t i = (size_t)w * 32; i < blk.fibers.size() && i < (size_t)w * 32 + 32; i++) {
            Fiber& g = blk.fibers[i];
            if (!g.done && g.blocked && g.warp_gen_wait == 1) g.blocked = false;
        }
    }
}

inline void syncwarp()
{
    const int w = blk.current / 32;
    Fiber& f = blk.fibers[blk.current];
    blk.warp_arrived[w]++;
    f.blocked = true;
    f.warp_gen_wait = 1;
    try_release_warp(w);
    if (f.blocked) switch_to_scheduler();
}

template <class T>
T shuffle_from(T v, int src_lane)
{
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    const int me = blk.current, w = me / 32;
    unsigned long long bits = 0;
    memcpy(&bits, &v, sizeof(T));
    blk.slots[me] = bits;
    syncwarp();
    const int src = w * 32 + src_lane;
    T r = v;
    if (src_lane >= 0 && src_lane < 32 && src != me) {
        if ((size_t)src >= blk.fibers.size() || !blk.slot_live[src])
            fail("a shuffle reads a lane that has exited or does not exist");
        memcpy(&r, &blk.slots[src], sizeof(T));
    }
    syncwarp();
    return r;
}

[[noreturn]] inline void fiber_entry()
{
    (*blk.body)();
    Fiber& f = blk.fibers[blk.current];
    f.done = true;
    blk.live--;
    blk.slot_live[blk.current] = 0;
    const int w = blk.current / 32;
    blk.warp_live[w]--;
    try_release_block();
    try_release_warp(w);
#if defined(__x86_64__)
    emu_switch(&f.sp, blk.sched_sp);
#else
    swapcontext(&f.ctx, &blk.sched);
#endif
    fail("a finished thread was resumed");
}

inline void run_block(int nthreads)
{
    if ((int)blk.stacks.size() < nthreads) {
        for (int i = (int)blk.stacks.size(); i < nthreads; i++) {
            char* s = (char*)malloc(blk.stack_size);
            if (!s) fail("out of memory for fiber stacks");
            blk.stacks.push_back(s);
        }
    }
    blk.fibers.assign(nthreads, Fiber());
    const int nwarps = (nthreads + 31) / 32;
    blk.warp_live.assign(nwarps, 0);
    blk.warp_arrived.assign(nwarps, 0);
    blk.slots.assign(nthreads, 0);
    blk.slot_live.assign(nthreads, 1);
    for (int i = 0; i < nthreads; i++) {
        Fiber& f = blk.fibers[i];
        f.tid = {(unsigned)(i % blockDim.x), (unsigned)(i / blockDim.x % blockDim.y),
                 (unsigned)(i / (blockDim.x * blockDim.y))};
#if defined(__x86_64__)
        // The new stack, as emu_switch will pop it: six registers, then fiber_entry as the return
        // address, then a dummy return address for fiber_entry (so its frame is aligned as after a call).
        uintptr_t top = ((uintptr_t)blk.stacks[i] + blk.stack_size) & ~(uintptr_t)15;
        void** sp = (void**)top;
        *--sp = nullptr;
        *--sp = (void*)&fiber_entry;
        for (int r = 0; r < 6; r++) *--sp = nullptr;
        f.sp = sp;
#else
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = blk.stacks[i];
        f.ctx.uc_stack.ss_size = blk.stack_size;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_entry, 0);
#endif
        blk.warp_live[i / 32]++;
    }
    blk.live = nthreads;
    blk.arrived = 0;
    while (blk.live > 0) {
        bool progressed = false;
        for (int i = 0; i < nthreads; i++) {
            Fiber& f = blk.fibers[i];
            if (f.done || f.blocked) continue;
            blk.current = i;
            threadIdx = f.tid;
#if defined(__x86_64__)
            emu_switch(&blk.sched_sp, f.sp);
#else
            swapcontext(&blk.sched, &f.ctx);
#endif
            progressed = true;
        }
        if (!progressed && blk.live > 0) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "deadlock in block (%u,%u,%u): %d threads wait at a barrier that %d other live threads never reach",
                     blockIdx.x, blockIdx.y, blockIdx.z, blk.arrived, blk.live - blk.arrived);
            fail(msg);
        }
    }
}

struct Config {
    dim3 grid, block;
    size_t smem;
    template <class F, class... Args>
    void operator()(F kernel, Args... args) const
    {
        const unsigned long long nthreads = (unsigned long long)block.x * block.y * block.z;
        if (nthreads == 0 || nthreads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
            grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
            fprintf(stderr, "emu: invalid launch configuration: grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x, grid.y,
                    grid.z, block.x, block.y, block.z);
            last_error = cudaErrorInvalidConfiguration;
            return;
        }
        if (smem > dyn_smem_limit) {
            fprintf(stderr, "emu: %zu bytes of dynamic shared memory, above the limit of %zu\n", smem, dyn_smem_limit);
            last_error = cudaErrorInvalidValue;
            return;
        }
        blk.dyn_smem.assign(smem + 16, 0);
        const std::function<void()> body = [&]() { kernel(args...); };
        blk.body = &body;
        gridDim = grid;
        blockDim = block;
        for (unsigned z = 0; z < grid.z; z++)
            for (unsigned y = 0; y < grid.y; y++)
                for (unsigned x = 0; x < grid.x; x++) {
                    blockIdx = {x, y, z};
                    run_block((int)nthreads);
                }
        blk.body = nullptr;
    }
};
inline Config cfg(dim3 g, dim3 b, size_t smem = 0, cudaStream_t = nullptr) { return Config{g, b, smem}; }
inline void* dynamic_smem() { return blk.dyn_smem.data(); }
}  // namespace emu

// ---- device functions --------------------------------------------------------------------
inline void __syncthreads() { emu::syncthreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }
inline void __threadfence() {}
inline void __threadfence_block() {}
template <class T> T __shfl_sync(unsigned, T v, int src, int width = 32)
{
    const int lane = emu::flat_tid() % 32, base = lane / width * width;
    return emu::shuffle_from(v, base + ((src % width) + width) % width);
}
template <class T> T __shfl_xor_sync(unsigned, T v, int mask, int width = 32)
{
    const int lane = emu::flat_tid() % 32;
    const int src = lane ^ mask;
    return emu::shuffle_from(v, src / width == lane / width ? src : lane);
}
template <class T> T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32)
{
    const int lane = emu::flat_tid() % 32;
    const int src = lane + (int)delta;
    return emu::shuffle_from(v, src / width == lane / width ? src : lane);
}
template <class T> T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32)
{
    const int lane = emu::flat_tid() % 32;
    const int src = lane - (int)delta;
    return emu::shuffle_from(v, src >= 0 && src / width == lane / width ? src : lane);
}
inline unsigned __ballot_sync(unsigned, int pred)
{
    const int me = emu::flat_tid(), w = me / 32;
    emu::blk.slots[me] = pred ? 1 : 0;
    emu::syncwarp();
    unsigned bits = 0;
    for (int l = 0; l < 32 && w * 32 + l < (int)emu::blk.fibers.size(); l++)
        if (emu::blk.slot_live[w * 32 + l] && emu::blk.slots[w * 32 + l]) bits |= 1u << l;
    emu::syncwarp();
    return bits;
}
inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0; }
inline int __all_sync(unsigned, int p)
{
    const int me = emu::flat_tid(), w = me / 32;
    emu::blk.slots[me] = p ? 1 : 0;
    emu::syncwarp();
    int all = 1;
    for (int l = 0; l < 32 && w * 32 + l < (int)emu::blk.fibers.size(); l++)
        if (emu::blk.slot_live[w * 32 + l] && !emu::blk.slots[w * 32 + l]) all = 0;
    emu::syncwarp();
    return all;
}
inline unsigned __activemask() { return 0xffffffffu; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(unsigned v) { return __builtin_ffs((int)v); }
inline int __clz(unsigned v) { return v ? __builtin_clz(v) : 32; }

template <class T> T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }
template <class T> T atomicSub(T* p, T v) { T o = *p; *p = o - v; return o; }
template <class T> T atomicMax(T* p, T v) { T o = *p; if (v > o) *p = v; return o; }
template <class T> T atomicMin(T* p, T v) { T o = *p; if (v < o) *p = v; return o; }
template <class T> T atomicExch(T* p, T v) { T o = *p; *p = v; return o; }
template <class T> T atomicCAS(T* p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
inline unsigned atomicInc(unsigned* p, unsigned lim) { unsigned o = *p; *p = o >= lim ? 0 : o + 1; return o; }

template <class T> T __ldg(const T* p) { return *p; }
template <class T> T __ldcg(const T* p) { return *p; }
template <class T> T __ldca(const T* p) { return *p; }
template <class T> T __ldcs(const T* p) { return *p; }
template <class T> T __ldlu(const T* p) { return *p; }
template <class T> void __stcs(T* p, T v) { *p = v; }
template <class T> void __stcg(T* p, T v) { *p = v; }
template <class T> void __stwt(T* p, T v) { *p = v; }

template <class A, class B> inline auto min(A a, B b) -> typename std::common_type<A, B>::type
{
    typedef typename std::common_type<A, B>::type T;
    return (T)a < (T)b ? (T)a : (T)b;
}
template <class A, class B> inline auto max(A a, B b) -> typename std::common_type<A, B>::type
{
    typedef typename std::common_type<A, B>::type T;
    return (T)a > (T)b ? (T)a : (T)b;
}
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float exp2f_emu(float x) { return exp2f(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline int __float2int_rn(float x) { return (int)lrintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline float __int2float_rn(int x) { return (float)x; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }

#endif
