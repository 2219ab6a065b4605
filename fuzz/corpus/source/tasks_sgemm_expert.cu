// sgemm, expert: C = A*B in f32, row-major (A: M x K, B: K x N, C: M x N).
//
// Optimizations (each marked where it sits):
//  - smem-tile: BM x BK tile of A and BK x BN tile of B per block in shared memory
//  - transposed A tile: A is stored k-major in shared memory, so a thread reads its TM
//    values of A for one k as two float4
//  - register-tile: TM x TN (8 x 8) outputs per thread, as two 4 x 4 quadrants BM/2 and BN/2
//    apart so the shared-memory float4 reads of a warp are broadcasts or conflict-free
//  - vectorize: float4 global loads of A and B and float4 stores of C (when K and N are
//    multiples of 4 and the pointers 16-byte aligned; otherwise the same kernel with
//    scalar loads and stores)
//  - double-buffer: two shared-memory stages; the next tile is fetched into registers
//    while the current one is multiplied, one barrier per k-tile
//  - smem-pad: +4 columns in the transposed A tile against bank conflicts on its stores
//    (4, not 1, keeps the float4 reads aligned)
//  - swizzle: blocks grouped 8 block-rows at a time, so the blocks in flight together share
//    A and B tiles in L2 (float4 path)
//  - unroll, launch-bounds, restrict
// Edges: loads outside A or B give zeros, stores outside C are skipped, so any M, N, K works.
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int BM = 128;                      // block tile rows (of C)
constexpr int BN = 128;                      // block tile cols (of C)
constexpr int BK = 8;                        // k-depth of one tile
constexpr int TM = 8;                        // rows of C per thread
constexpr int TN = 8;                        // cols of C per thread
constexpr int THREADS = (BM / TM) * (BN / TN);  // 256
constexpr int VEC = 4;                       // floats per 16-byte access
constexpr int PAD_A = 4;                     // extra columns of the transposed A tile
constexpr int MIN_BLOCKS = 2;                // blocks per SM the register budget must allow
constexpr int GROUP = 8;                     // block-rows per swizzle group

static_assert(BM * BK == THREADS * VEC, "one float4 of A per thread per tile");
static_assert(BK * BN == THREADS * VEC, "one float4 of B per thread per tile");
static_assert(TM == 2 * VEC && TN == 2 * VEC, "two float4 quadrants per thread in each direction");

template <bool VECTOR>
// launch-bounds
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,  // restrict
            int M, int N, int K)
{
    // smem-tile: A (transposed, k-major) and B tiles, two stages each
    // smem-pad: +4 columns against bank conflicts
    // double-buffer: two stages
    __shared__ __align__(16) float As[2][BK][BM + PAD_A];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);          // 0..15: column quadrant index
    const int ty = tid / (BN / TN);          // 0..15: row quadrant index
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    if (VECTOR) {
        // swizzle: blocks launched close in time share rows of A and columns of B in L2
        // (GROUP block-rows per group, walked column by column; the scalar path, for
        // shapes that are not multiples of 4, keeps the plain order: no register to spare)
        const unsigned pid = blockIdx.y * gridDim.x + blockIdx.x, width = GROUP * gridDim.x;
        const unsigned first_m = pid / width * GROUP, gsize = min(gridDim.y - first_m, (unsigned)GROUP);
        m0 = (int)(first_m + pid % width % gsize) * BM;
        n0 = (int)(pid % width / gsize) * BN;
    }

    // Which float4 of each tile this thread fetches.
    const int a_row = tid / (BK / VEC), a_k = (tid % (BK / VEC)) * VEC;
    const int b_k = tid / (BN / VEC), b_col = (tid % (BN / VEC)) * VEC;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    float ra[VEC], rb[VEC];  // the next tile's elements, in flight
    auto load_tiles = [&](int kt) {
        const int ar = m0 + a_row, ak = kt * BK + a_k;
        const int bk = kt * BK + b_k, bc = n0 + b_col;
        if (VECTOR) {
            // vectorize: float4 loads (K % 4 == 0 and N % 4 == 0: a float4 is all in or all out)
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
            if (ar < M && ak < K) a = *reinterpret_cast<const float4*>(A + (size_t)ar * K + ak);
            if (bk < K && bc < N) b = *reinterpret_cast<const float4*>(B + (size_t)bk * N + bc);
            ra[0] = a.x; ra[1] = a.y; ra[2] = a.z; ra[3] = a.w;
            rb[0] = b.x; rb[1] = b.y; rb[2] = b.z; rb[3] = b.w;
        } else {
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                ra[e] = (ar < M && ak + e < K) ? A[(size_t)ar * K + ak + e] : 0.0f;
                rb[e] = (bk < K && bc + e < N) ? B[(size_t)bk * N + bc + e] : 0.0f;
            }
        }
    };
    auto store_tiles = [&](int buf) {
#pragma unroll
        for (int e = 0; e < VEC; e++) As[buf][a_k + e][a_row] = ra[e];  // transposed A tile
        *reinterpret_cast<float4*>(&Bs[buf][b_k][b_col]) = make_float4(rb[0], rb[1], rb[2], rb[3]);
    };

    const int k_tiles = (K + BK - 1) / BK;
    load_tiles(0);
    store_tiles(0);
    __syncthreads();

    for (int kt = 0; kt < k_tiles; kt++) {
        const int cur = kt & 1;
        // double-buffer: fetch the next tile into registers while this one is multiplied
        if (kt + 1 < k_tiles) load_tiles(kt + 1);

        // unroll
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            // register-tile: TM×TN outputs per thread
            float a[TM], b[TN];
            const float4 a_lo = *reinterpret_cast<const float4*>(&As[cur][kk][ty * VEC]);
            const float4 a_hi = *reinterpret_cast<const float4*>(&As[cur][kk][BM / 2 + ty * VEC]);
            const float4 b_lo = *reinterpret_cast<const float4*>(&Bs[cur][kk][tx * VEC]);
            const float4 b_hi = *reinterpret_cast<const float4*>(&Bs[cur][kk][BN / 2 + tx * VEC]);
            a[0] = a_lo.x; a[1] = a_lo.y; a[2] = a_lo.z; a[3] = a_lo.w;
            a[4] = a_hi.x; a[5] = a_hi.y; a[6] = a_hi.z; a[7] = a_hi.w;
            b[0] = b_lo.x; b[1] = b_lo.y; b[2] = b_lo.z; b[3] = b_lo.w;
            b[4] = b_hi.x; b[5] = b_hi.y; b[6] = b_hi.z; b[7] = b_hi.w;
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] += a[i] * b[j];
        }

        // The other stage was last read before the previous barrier, so it is free.
        if (kt + 1 < k_tiles) store_tiles(cur ^ 1);
        __syncthreads();
    }

    // Thread (ty, tx) holds rows {ty*4 + i, BM/2 + ty*4 + i} and cols {tx*4 + j, BN/2 + tx*4 + j}.
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int r = m0 + (i < VEC ? ty * VEC + i : BM / 2 + ty * VEC + (i - VEC));
        if (r >= M) continue;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int c = n0 + half * (BN / 2) + tx * VEC;
            const float* v = &acc[i][half * VEC];
            if (VECTOR) {
                // vectorize: float4 stores
                if (c < N) *reinterpret_cast<float4*>(C + (size_t)r * N + c) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    if (c + e < N) C[(size_t)r * N + c + e] = v[e];
            }
        }
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    if (M <= 0 || N <= 0) return;
    const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    const bool aligned = K % VEC == 0 && N % VEC == 0 && (uintptr_t)A % 16 == 0 && (uintptr_t)B % 16 == 0 &&
                         (uintptr_t)C % 16 == 0;
    if (aligned)
        sgemm_tiled<true><<<grid, THREADS, 0, stream>>>(A, B, C, M, N, K);
    else
        sgemm_tiled<false><<<grid, THREADS, 0, stream>>>(A, B, C, M, N, K);
}
