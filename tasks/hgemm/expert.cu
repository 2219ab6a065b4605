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

// A wgmma shared-memory descriptor: start address, leading and stride byte offsets, 128-byte swizzle.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr, uint32_t lead, uint32_t stride)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)(lead >> 4) << 16 | (uint64_t)(stride >> 4) << 32 |
           (uint64_t)1 << 62;
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
// Shared memory written by this thread (cp.async or plain stores) becomes visible to the wgmma reads.
__device__ __forceinline__ void fence_async_shared()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// d += A * B for one m64n256k16 tile of the warpgroup: A (64 x 16) and B (16 x 256) read from
// shared memory through their descriptors, B N-major (imm-trans-b = 1).
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[32][4], uint64_t desc_a, uint64_t desc_b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
                   "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                   "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
                   "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]),
                   "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]),
                   "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]),
                   "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]),
                   "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]),
                   "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]),
                   "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]),
                   "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]), "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]),
                   "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])
                 : "l"(desc_a), "l"(desc_b), "r"(1));
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
        fence_async_shared();
        __syncthreads();
        const int next = kt + AHEAD;
        if (next < k_tiles)
            load_stage<ASYNC>(smem + (next % STAGES) * STAGE, smem + (next % STAGES) * STAGE + A_STAGE, A, B, M, N, K,
                              m0, n0, next * BK);
        cp_async_commit();

        const uint32_t as = smem_addr(smem + (kt % STAGES) * STAGE) + wg * WG_M * ROW_BYTES;
        const uint32_t bs = smem_addr(smem + (kt % STAGES) * STAGE + A_STAGE);
        wgmma_fence();
        // unroll
#pragma unroll
        for (int kk = 0; kk < BK / MMA_K; kk++) {
            // tensor-core: wgmma m64nBNk16; A advances 32 bytes per k step inside its swizzled rows,
            // B 16 rows; B's 64-column segments are BK rows apart (the leading byte offset)
            const uint64_t db = wgmma_desc(bs + kk * MMA_K * ROW_BYTES, BK * ROW_BYTES, ATOM);
#pragma unroll
            for (int mi = 0; mi < FRAG_M; mi++)
                wgmma_m64n256k16(acc[mi], wgmma_desc(as + mi * MMA_M * ROW_BYTES + kk * MMA_K * 2, 16, ATOM), db);
        }
        wgmma_commit();
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
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
