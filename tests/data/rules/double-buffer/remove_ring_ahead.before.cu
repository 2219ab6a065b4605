// test: remove double-buffer@hgemm_wgmma:166
// hgemm, expert: C = A*B with bf16 A, B (row-major: A is M x K, B is K x N), f32
// accumulation on the tensor cores, bf16 C (M x N, row-major).
//
// Optimizations (each marked where it sits):
//  - tensor-core: wgmma.mma_async m64n256k16 (bf16 inputs, f32 accumulators), issued by each
//    warpgroup of four warps on operands read straight from shared memory through descriptors
//  - smem-tile: BM x BK tile of A and BK x BN tile of B per stage in shared memory
//  - register-tile: each warpgroup owns WG_M = 64 rows of the 128 x 256 block tile, all BN
//    columns: FRAG_M x FRAG_N fragments of 16 x 8 per warp (128 f32 accumulators per thread)
//  - smem-swizzle: the tiles are stored in the 128-byte swizzled layout the descriptors name
//    (16-byte chunk c of a 128-byte row r at chunk c ^ (r % 8)): A K-major, B N-major in
//    64-column segments; the copies and the tensor cores meet no bank conflicts
//  - multi-stage pipeline: cp.async 16-byte copies global -> shared, STAGES tiles in shared
//    memory, AHEAD = STAGES - 2 fetched ahead, one barrier per k-tile; one wgmma group stays in
//    flight across it
//  - vectorize: bf16x2 stores of C
//  - unroll, launch-bounds, restrict
// Edges: chunks outside A or B are zero-filled (cp.async with src-size 0), stores outside C
// are skipped. cp.async needs 16-byte aligned sources, i.e. K % 8 == 0 and N % 8 == 0;
// other shapes run the same kernel with element-wise loads into shared memory (loops kept
// rolled there: unrolled, they spill beside the 128 accumulators).
// wgmma needs the arch-specific target sm_90a (the gate compiles for it when it sees wgmma).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

constexpr int BM = 128;                      // block tile rows (of C)
constexpr int BN = 256;                      // block tile cols (of C)
constexpr int BK = 64;                       // k-depth of one stage: one 128-byte row of A per tile row
constexpr int WARPGROUPS = 2;                // warpgroups down the block tile
constexpr int THREADS = WARPGROUPS * 128;
constexpr int WG_M = BM / WARPGROUPS;        // 64: rows of a warpgroup
constexpr int MMA_M = 64, MMA_K = 16;        // one wgmma: 64 x BN x 16
constexpr int FRAG_M = WG_M / MMA_M;         // wgmma tiles down a warpgroup (16 rows of each per warp)
constexpr int FRAG_N = BN / 8;               // 8-column accumulator fragments across
constexpr int STAGES = 4;                   // k-tiles in shared memory
constexpr int AHEAD = STAGES - 2;            // k-tiles fetched ahead of the one being multiplied
constexpr int CHUNK = 8;                     // bf16 per 16-byte copy
constexpr int ROW_BYTES = 128;               // one swizzled row: 64 bf16
constexpr int A_STAGE = BM * BK * 2;         // bytes per stage
constexpr int B_STAGE = BK * BN * 2;
constexpr int STAGE = A_STAGE + B_STAGE;
constexpr int A_CHUNKS = BM * BK / CHUNK / THREADS;  // 16-byte copies per thread per stage
constexpr int B_CHUNKS = BK * BN / CHUNK / THREADS;
constexpr int ATOM = 8 * ROW_BYTES;          // the swizzle pattern repeats every 8 rows
constexpr size_t SMEM_BYTES = (size_t)STAGES * STAGE + ATOM;  // + room to align to ATOM

static_assert(BM * BK % (CHUNK * THREADS) == 0 && BK * BN % (CHUNK * THREADS) == 0, "whole copies per thread");
static_assert(BK * 2 == ROW_BYTES && BN % 64 == 0, "A rows and B row segments of 128 bytes");
static_assert(AHEAD >= 1, "at least one tile fetched ahead");

__device__ __forceinline__ uint32_t smem_addr(const void* p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

// smem-swizzle: byte offset of 16-byte chunk c (k / 8) of row r of the A tile (K-major rows of 128 bytes)
__device__ __forceinline__ uint32_t a_offset(int r, int c)
{
    return r * ROW_BYTES + ((c ^ (r & 7)) << 4);
}
// smem-swizzle: byte offset of chunk c (n / 8) of k-row kr of the B tile: 64-column segments of BK rows
// of 128 bytes each (N-major)
__device__ __forceinline__ uint32_t b_offset(int kr, int c)
{
    return (c / 8) * (BK * ROW_BYTES) + kr * ROW_BYTES + (((c % 8) ^ (kr & 7)) << 4);
}

// 16-byte asynchronous copy; src_bytes = 0 writes zeros (the source is not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
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

// One stage: A rows m0.., k k0..; B rows k0.., cols n0... ASYNC: 16-byte cp.async with zero
// fill (K % 8 == 0 and N % 8 == 0, so a chunk is all in or all out); otherwise element-wise
// loads with a bounds check each, written to shared memory one element at a time.
template <bool ASYNC>
__device__ __forceinline__ void load_stage(unsigned char* as, unsigned char* bs, const __nv_bfloat16* A,
                                           const __nv_bfloat16* B, int M, int N, int K, int m0, int n0, int k0)
{
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
#pragma unroll
    for (int i = 0; i < A_CHUNKS; i++) {
        const int c = threadIdx.x + i * THREADS;
        const int row = c / (BK / CHUNK), kc = c % (BK / CHUNK);
        const int gr = m0 + row, gk = k0 + kc * CHUNK;
        unsigned char* dst = as + a_offset(row, kc);
        if (ASYNC) {
            const bool valid = gr < M && gk < K;
            cp_async16(smem_addr(dst), valid ? A + (size_t)gr * K + gk : A, valid ? 16 : 0);
        } else {
            __nv_bfloat16* d = reinterpret_cast<__nv_bfloat16*>(dst);
#pragma unroll 1
            for (int e = 0; e < CHUNK; e++) d[e] = (gr < M && gk + e < K) ? A[(size_t)gr * K + gk + e] : zero;
        }
    }
#pragma unroll
    for (int i = 0; i < B_CHUNKS; i++) {
        const int c = threadIdx.x + i * THREADS;
        const int krow = c / (BN / CHUNK), nc = c % (BN / CHUNK);
        const int gk = k0 + krow, gn = n0 + nc * CHUNK;
        unsigned char* dst = bs + b_offset(krow, nc);
        if (ASYNC) {
            const bool valid = gk < K && gn < N;
            cp_async16(smem_addr(dst), valid ? B + (size_t)gk * N + gn : B, valid ? 16 : 0);
        } else {
            __nv_bfloat16* d = reinterpret_cast<__nv_bfloat16*>(dst);
#pragma unroll 1
            for (int e = 0; e < CHUNK; e++) d[e] = (gk < K && gn + e < N) ? B[(size_t)gk * N + gn + e] : zero;
        }
    }
}

// wgmma removed: its tiles read by per-warp mma.sync. kl_sw128: the element at byte offset off (as the
// descriptor lays the tile out, before the swizzle) past the descriptor's start address; the 128-byte
// swizzle XORs bits 4-6 of the shared address with bits 7-9.
__device__ __forceinline__ const __nv_bfloat16* kl_sw128(uint32_t start, uint32_t off)
{
    const uint32_t a = start + off;
    return reinterpret_cast<const __nv_bfloat16*>(__cvta_shared_to_generic(a ^ (a >> 3 & 0x70)));
}

template <bool ASYNC>
// launch-bounds
__global__ void __launch_bounds__(THREADS, 1)
hgemm_wgmma(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,  // restrict
            __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    // smem-tile: STAGES stages of the A and B tiles (dynamic shared memory, aligned to the
    // swizzle's 1024-byte pattern)
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((ATOM - smem_addr(smem_raw) % ATOM) % ATOM);

    const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    // register-tile: FRAG_M x FRAG_N accumulator fragments per thread
    float acc[FRAG_M][FRAG_N][4];
#pragma unroll
    for (int mi = 0; mi < FRAG_M; mi++)
#pragma unroll
        for (int ni = 0; ni < FRAG_N; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;

    const int k_tiles = (K + BK - 1) / BK;

    // double-buffer: cp.async multi-stage pipeline; AHEAD tiles are fetched ahead
#pragma unroll
    for (int s = 0; s < AHEAD; s++) {
        if (s < k_tiles) load_stage<ASYNC>(smem + s * STAGE, smem + s * STAGE + A_STAGE, A, B, M, N, K, m0, n0, s * BK);
        cp_async_commit();
    }

    for (int kt = 0; kt < k_tiles; kt++) {
        // Tile kt has landed (at most AHEAD - 1 younger groups pending) and is visible to the
        // tensor cores; every warpgroup is done with tile kt - 2, whose stage the next fetch
        // overwrites (its wgmma group was waited for in iteration kt - 1).
        cp_async_wait<AHEAD - 1>();
        __syncthreads();
        const int next = kt + AHEAD;
        if (next < k_tiles)
            load_stage<ASYNC>(smem + (next % STAGES) * STAGE, smem + (next % STAGES) * STAGE + A_STAGE, A, B, M, N, K,
                              m0, n0, next * BK);
        cp_async_commit();

        const uint32_t as = smem_addr(smem + (kt % STAGES) * STAGE) + wg * WG_M * ROW_BYTES;
        const uint32_t bs = smem_addr(smem + (kt % STAGES) * STAGE + A_STAGE);
        // unroll
#pragma unroll
        for (int kk = 0; kk < BK / MMA_K; kk++) {
            // tensor-core removed: scalar f32 FMAs over the same shared tiles; each lane computes the m16n8k16
            // accumulator elements it held (element e: row lane / 4 + 8 * (e / 2), col 2 * (lane % 4) + e % 2 of the
            // 16 x 8 tile), reading A and B where its ldmatrix lanes read them
            for (int mi = 0; mi < FRAG_M; mi++)
                for (int kl_ni = 0; kl_ni < FRAG_N; kl_ni++)
                    for (int kl_e = 0; kl_e < 4; kl_e++) {
                        const int kl_r = lane / 4 + 8 * (kl_e / 2), kl_c = 2 * (lane % 4) + kl_e % 2;
                        for (int kl_x = 0; kl_x < 16; kl_x++)
                            acc[mi][kl_ni][kl_e] += __bfloat162float((kl_sw128(as + mi * MMA_M * ROW_BYTES + kk * MMA_K * 2, (16 * (threadIdx.x / 32 % 4) + kl_r) / 8 * (ATOM) + (16 * (threadIdx.x / 32 % 4) + kl_r) % 8 * 128 + ((kl_x / 8) * 8) * 2))[kl_x % 8]) *
                                __bfloat162float((kl_sw128(bs + kk * MMA_K * ROW_BYTES, ((kl_ni / 2) * 16 + (kl_ni % 2) * 8) / 64 * (BK * ROW_BYTES) + kl_x / 8 * (ATOM) + kl_x % 8 * 128 + ((kl_ni / 2) * 16 + (kl_ni % 2) * 8) % 64 * 2))[kl_c]);
                    }
        }
    }
    cp_async_wait<0>();

    // Accumulator layout (per warp, as mma.sync's): e = 0, 1 at (lane / 4, 2 * (lane % 4) + e),
    // e = 2, 3 eight rows below, fragment ni eight columns right of ni - 1.
#pragma unroll
    for (int mi = 0; mi < FRAG_M; mi++) {
#pragma unroll
        for (int ni = 0; ni < FRAG_N; ni++) {
            const int c = n0 + ni * 8 + (lane % 4) * 2;
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int r = m0 + wg * WG_M + mi * MMA_M + warp * 16 + lane / 4 + half * 8;
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
        cudaFuncSetAttribute(hgemm_wgmma<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES);
        hgemm_wgmma<true><<<grid, THREADS, SMEM_BYTES, stream>>>(A, B, C, M, N, K);
    } else {
        cudaFuncSetAttribute(hgemm_wgmma<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES);
        hgemm_wgmma<false><<<grid, THREADS, SMEM_BYTES, stream>>>(A, B, C, M, N, K);
    }
}
