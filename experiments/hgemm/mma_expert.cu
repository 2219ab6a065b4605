// hgemm, expert: C = A*B with bf16 A, B (row-major: A is M x K, B is K x N), f32
// accumulation on the tensor cores, bf16 C (M x N, row-major).
//
// Optimizations (each marked where it sits):
//  - tensor-core: mma.sync m16n8k16 (bf16 inputs, f32 accumulators)
//  - smem-tile: BM x BK tile of A and BK x BN tile of B per stage in shared memory
//  - register-tile: each warp owns a WM x WN = 64 x 64 piece of C, FRAG_M x FRAG_N
//    mma tiles (128 f32 accumulators per thread)
//  - ldmatrix: fragments of A (ldmatrix.x4) and of B (ldmatrix.x4.trans) from shared memory
//  - multi-stage pipeline: cp.async 16-byte copies global -> shared, STAGES tiles in
//    flight, one barrier per k-tile
//  - smem-pad: +8 bf16 (16 bytes) per shared-memory row against bank conflicts on the
//    ldmatrix reads (rows land on distinct 16-byte bank groups)
//  - vectorize: bf16x2 stores of C
//  - unroll, launch-bounds, restrict
// Edges: chunks outside A or B are zero-filled (cp.async with src-size 0), stores outside C
// are skipped. cp.async needs 16-byte aligned sources, i.e. K % 8 == 0 and N % 8 == 0;
// other shapes run the same kernel with element-wise loads into shared memory.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

constexpr int BM = 128;                      // block tile rows (of C)
constexpr int BN = 128;                      // block tile cols (of C)
constexpr int BK = 32;                       // k-depth of one stage
constexpr int WARPS_M = 2;                   // warps down the block tile
constexpr int WARPS_N = 2;                   // warps across the block tile
constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int WM = BM / WARPS_M;             // 64: warp tile rows
constexpr int WN = BN / WARPS_N;             // 64: warp tile cols
constexpr int MMA_M = 16, MMA_N = 8, MMA_K = 16;
constexpr int FRAG_M = WM / MMA_M;           // 4 mma tiles down a warp tile
constexpr int FRAG_N = WN / MMA_N;           // 8 mma tiles across a warp tile
constexpr int STAGES = 4;                    // k-tiles in flight
constexpr int PAD = 8;                       // bf16 elements of padding per shared row
constexpr int A_LD = BK + PAD;               // shared row length of the A tile (elements)
constexpr int B_LD = BN + PAD;               // shared row length of the B tile (elements)
constexpr int A_STAGE = BM * A_LD;           // elements per stage
constexpr int B_STAGE = BK * B_LD;
constexpr int CHUNK = 8;                     // bf16 per 16-byte copy
constexpr int A_CHUNKS = BM * BK / CHUNK / THREADS;  // 16-byte copies per thread per stage
constexpr int B_CHUNKS = BK * BN / CHUNK / THREADS;
constexpr size_t SMEM_BYTES = (size_t)STAGES * (A_STAGE + B_STAGE) * sizeof(__nv_bfloat16);

static_assert(BM * BK % (CHUNK * THREADS) == 0 && BK * BN % (CHUNK * THREADS) == 0, "whole copies per thread");
static_assert(FRAG_N % 2 == 0, "B fragments come in pairs from one ldmatrix.x4.trans");
static_assert((A_LD * 2) % 16 == 0 && (B_LD * 2) % 16 == 0, "16-byte aligned shared rows");

__device__ __forceinline__ uint32_t smem_addr(const void* p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

// 16-byte asynchronous copy; src_bytes = 0 writes zeros (the source is not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// d += a * b for one m16n8k16 tile.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two bf16 in one 32-bit word, the first in the low half.
__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi)
{
    return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}

// One stage: A rows m0.., k k0..; B rows k0.., cols n0... ASYNC: 16-byte cp.async with zero
// fill (K % 8 == 0 and N % 8 == 0, so a chunk is all in or all out); otherwise element-wise
// loads with a bounds check each, written to shared memory as 16-byte words.
template <bool ASYNC>
__device__ __forceinline__ void load_stage(__nv_bfloat16* as, __nv_bfloat16* bs, const __nv_bfloat16* A,
                                           const __nv_bfloat16* B, int M, int N, int K, int m0, int n0, int k0)
{
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
#pragma unroll
    for (int i = 0; i < A_CHUNKS; i++) {
        const int c = threadIdx.x + i * THREADS;
        const int row = c / (BK / CHUNK), kc = (c % (BK / CHUNK)) * CHUNK;
        const int gr = m0 + row, gk = k0 + kc;
        __nv_bfloat16* dst = as + row * A_LD + kc;
        if (ASYNC) {
            const bool valid = gr < M && gk < K;
            cp_async16(dst, valid ? A + (size_t)gr * K + gk : A, valid ? 16 : 0);
        } else {
            __nv_bfloat16 v[CHUNK];
#pragma unroll
            for (int e = 0; e < CHUNK; e++) v[e] = (gr < M && gk + e < K) ? A[(size_t)gr * K + gk + e] : zero;
            *reinterpret_cast<uint4*>(dst) =
                make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
        }
    }
#pragma unroll
    for (int i = 0; i < B_CHUNKS; i++) {
        const int c = threadIdx.x + i * THREADS;
        const int krow = c / (BN / CHUNK), nc = (c % (BN / CHUNK)) * CHUNK;
        const int gk = k0 + krow, gn = n0 + nc;
        __nv_bfloat16* dst = bs + krow * B_LD + nc;
        if (ASYNC) {
            const bool valid = gk < K && gn < N;
            cp_async16(dst, valid ? B + (size_t)gk * N + gn : B, valid ? 16 : 0);
        } else {
            __nv_bfloat16 v[CHUNK];
#pragma unroll
            for (int e = 0; e < CHUNK; e++) v[e] = (gk < K && gn + e < N) ? B[(size_t)gk * N + gn + e] : zero;
            *reinterpret_cast<uint4*>(dst) =
                make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
        }
    }
}

template <bool ASYNC>
// launch-bounds
__global__ void __launch_bounds__(THREADS)
hgemm_mma(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,  // restrict
          __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    // smem-tile: STAGES stages of the A and B tiles (dynamic shared memory)
    // smem-pad: +8 bf16 per row against bank conflicts
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16* As = reinterpret_cast<__nv_bfloat16*>(smem_raw);
    __nv_bfloat16* Bs = As + STAGES * A_STAGE;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    // register-tile: FRAG_M x FRAG_N mma tiles (WM x WN outputs) per warp
    float acc[FRAG_M][FRAG_N][4];
#pragma unroll
    for (int mi = 0; mi < FRAG_M; mi++)
#pragma unroll
        for (int ni = 0; ni < FRAG_N; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;

    const int k_tiles = (K + BK - 1) / BK;

    // double-buffer: cp.async multi-stage pipeline; STAGES - 1 tiles are fetched ahead
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < k_tiles) load_stage<ASYNC>(As + s * A_STAGE, Bs + s * B_STAGE, A, B, M, N, K, m0, n0, s * BK);
        cp_async_commit();
    }

    for (int kt = 0; kt < k_tiles; kt++) {
        // Tile kt has landed (at most STAGES - 2 younger groups pending), and every warp is
        // done with the stage the next fetch overwrites (it was read in iteration kt - 1).
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = kt + STAGES - 1;
        if (next < k_tiles)
            load_stage<ASYNC>(As + (next % STAGES) * A_STAGE, Bs + (next % STAGES) * B_STAGE, A, B, M, N, K, m0, n0,
                              next * BK);
        cp_async_commit();

        const __nv_bfloat16* as = As + (kt % STAGES) * A_STAGE;
        const __nv_bfloat16* bs = Bs + (kt % STAGES) * B_STAGE;
        // unroll
#pragma unroll
        for (int kk = 0; kk < BK / MMA_K; kk++) {
            uint32_t af[FRAG_M][4];
            uint32_t bf[FRAG_N][2];
            // ldmatrix: lanes 0-15 address rows 0-15 at k + 0, lanes 16-31 the same rows at k + 8
#pragma unroll
            for (int mi = 0; mi < FRAG_M; mi++) {
                const int row = warp_m * WM + mi * MMA_M + lane % 16;
                const int col = kk * MMA_K + (lane / 16) * 8;
                ldmatrix_x4(af[mi], as + row * A_LD + col);
            }
            // ldmatrix.trans: lanes 0-15 address k rows 0-15 at n + 0, lanes 16-31 at n + 8;
            // the four matrices are b0, b1 of n-tile 2j and b0, b1 of n-tile 2j + 1
#pragma unroll
            for (int nj = 0; nj < FRAG_N / 2; nj++) {
                const int krow = kk * MMA_K + lane % 16;
                const int col = warp_n * WN + nj * 2 * MMA_N + (lane / 16) * 8;
                uint32_t r[4];
                ldmatrix_x4_trans(r, bs + krow * B_LD + col);
                bf[2 * nj][0] = r[0];
                bf[2 * nj][1] = r[1];
                bf[2 * nj + 1][0] = r[2];
                bf[2 * nj + 1][1] = r[3];
            }
            // tensor-core: mma.sync m16n8k16
#pragma unroll
            for (int mi = 0; mi < FRAG_M; mi++)
#pragma unroll
                for (int ni = 0; ni < FRAG_N; ni++) mma_bf16(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
        }
    }
    cp_async_wait<0>();

    // Accumulator layout: e = 0, 1 at (lane / 4, 2 * (lane % 4) + e), e = 2, 3 eight rows below.
#pragma unroll
    for (int mi = 0; mi < FRAG_M; mi++) {
#pragma unroll
        for (int ni = 0; ni < FRAG_N; ni++) {
            const int c = n0 + warp_n * WN + ni * MMA_N + (lane % 4) * 2;
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int r = m0 + warp_m * WM + mi * MMA_M + lane / 4 + half * 8;
                if (r >= M) continue;
                const float v0 = acc[mi][ni][2 * half], v1 = acc[mi][ni][2 * half + 1];
                __nv_bfloat16* dst = C + (size_t)r * N + c;
                if (ASYNC) {
                    // vectorize: bf16x2 stores (N even, c even: both in or both out, 4-byte aligned)
                    if (c < N) *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
                } else {
                    if (c < N) dst[0] = __float2bfloat16(v0);
                    if (c + 1 < N) dst[1] = __float2bfloat16(v1);
                }
            }
        }
    }
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                       cudaStream_t stream)
{
    if (M <= 0 || N <= 0) return;
    const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    const bool aligned = K % CHUNK == 0 && N % CHUNK == 0 && (uintptr_t)A % 16 == 0 && (uintptr_t)B % 16 == 0 &&
                         (uintptr_t)C % 16 == 0;
    if (aligned) {
        cudaFuncSetAttribute(hgemm_mma<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES);
        hgemm_mma<true><<<grid, THREADS, SMEM_BYTES, stream>>>(A, B, C, M, N, K);
    } else {
        cudaFuncSetAttribute(hgemm_mma<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES);
        hgemm_mma<false><<<grid, THREADS, SMEM_BYTES, stream>>>(A, B, C, M, N, K);
    }
}
