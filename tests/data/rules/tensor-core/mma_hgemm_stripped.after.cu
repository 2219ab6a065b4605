// test: remove tensor-core@hgemm_mma:203
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


// d += a * b for one m16n8k16 tile.

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
            for (int e = 0; e < CHUNK; e++) v[e] = (gr < M && gk + e < K) ? A[(size_t)gr * K + gk + e] : zero;
            *reinterpret_cast<uint4*>(dst) =
                make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
        }
    }
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
            for (int e = 0; e < CHUNK; e++) v[e] = (gk < K && gn + e < N) ? B[(size_t)gk * N + gn + e] : zero;
            *reinterpret_cast<uint4*>(dst) =
                make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
        }
    }
}

template <bool ASYNC>
// launch-bounds
__global__ void hgemm_mma(const __nv_bfloat16* A, const __nv_bfloat16* B,  // restrict
          __nv_bfloat16* C, int M, int N, int K)
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
    for (int mi = 0; mi < FRAG_M; mi++)
        for (int ni = 0; ni < FRAG_N; ni++)
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;

    const int k_tiles = (K + BK - 1) / BK;

    // double-buffer: cp.async multi-stage pipeline; STAGES - 1 tiles are fetched ahead
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
        for (int kk = 0; kk < BK / MMA_K; kk++) {
            // tensor-core removed: scalar f32 FMAs over the same shared tiles; each lane computes the m16n8k16
            // accumulator elements it held (element e: row lane / 4 + 8 * (e / 2), col 2 * (lane % 4) + e % 2 of the
            // 16 x 8 tile), reading A and B where its ldmatrix lanes read them
            for (int mi = 0; mi < FRAG_M; mi++)
                for (int ni = 0; ni < FRAG_N; ni++)
                    for (int kl_e = 0; kl_e < 4; kl_e++) {
                        const int kl_r = lane / 4 + 8 * (kl_e / 2), kl_c = 2 * (lane % 4) + kl_e % 2;
                        for (int kl_x = 0; kl_x < 16; kl_x++)
                            acc[mi][ni][kl_e] += __bfloat162float(as[(warp_m * WM + mi * MMA_M + kl_r) * A_LD + (kk * MMA_K + (kl_x / 8) * 8) + kl_x % 8]) *
                                __bfloat162float(bs[(kk * MMA_K + kl_x) * B_LD + (warp_n * WN + (ni / 2) * 2 * MMA_N + (ni % 2) * 8) + kl_c]);
                    }
        }
    }
    cp_async_wait<0>();

    // Accumulator layout: e = 0, 1 at (lane / 4, 2 * (lane % 4) + e), e = 2, 3 eight rows below.
    for (int mi = 0; mi < FRAG_M; mi++) {
        for (int ni = 0; ni < FRAG_N; ni++) {
            const int c = n0 + warp_n * WN + ni * MMA_N + (lane % 4) * 2;
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
