// matmul, expert: a warp-tiled SGEMM, c = a * b in f32, row-major (a: m x k, b: k x n).
//
// The work is split three ways, each level a template parameter:
//   block tile  BM x BN (128 x 128), stepped through k in slices of BK (16);
//   warp tile   WM x WN (64 x 32): 8 warps as 2 x 4, each owning a 64 x 32 piece of the block tile;
//   lane tile   TM x TN (4 x 4), repeated WM_ITERS x WN_ITERS (2 x 2) times over the warp tile:
//               the 32 lanes form an 8 x 4 grid covering a 32 x 16 sub-tile per repetition,
//               so a thread owns 64 outputs in registers (nested constexpr loops, all unrolled).
// Optimizations:
//   - shared-memory tiles of a (transposed: k-major, so a lane reads its 4 rows of one k as one
//     float4) and of b, padded by 4 floats per row of the a tile (keeps float4 alignment);
//   - float4 global loads through reinterpret_cast (FETCH_FLOAT4) when k and n are multiples of 4
//     and the pointers are 16-byte aligned; the VEC = false instance loads element by element;
//   - double buffering: the next k-slice is fetched into registers while the current one is
//     multiplied; one barrier per k-slice;
//   - the block tiles are visited in groups of GROUP_M block-rows (1-D grid), so blocks running at
//     the same time share slices of a and b in L2;
//   - the a and b tile pointers advance by pointer increments (a_tile += BK, b_tile += BK * n);
//   - __launch_bounds__ (256 threads, 2 blocks per SM; 1 for the element-wise instance, whose
//     bounds tests need more than 128 registers), __restrict__.
// Edges: loads outside a or b give zeros and stores outside c are skipped, so any m, n, k works.
#include <cuda_runtime.h>
#include <stdint.h>

#define CEIL_DIV(x, y) (((x) + (y) - 1) / (y))
#define FETCH_FLOAT4(ref) (*reinterpret_cast<const float4*>(&(ref)))
#define STORE_FLOAT4(ref, v) (*reinterpret_cast<float4*>(&(ref)) = (v))

namespace wt {
constexpr int BM = 128, BN = 128, BK = 16;
constexpr int WM = 64, WN = 32;
constexpr int TM = 4, TN = 4;
constexpr int LANES_M = 8, LANES_N = 4;  // the lane grid inside a warp
constexpr int PAD = 4;                   // extra floats per row of the transposed a tile
constexpr int GROUP_M = 8;               // block-rows per group of the block order
constexpr int MIN_BLOCKS = 2;

constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int WM_ITERS = WM / (LANES_M * TM), WN_ITERS = WN / (LANES_N * TN);
constexpr int A_LOADS = BM * BK / 4 / THREADS;  // float4 loads of the a tile per thread
constexpr int B_LOADS = BK * BN / 4 / THREADS;  // float4 loads of the b tile per thread

static_assert(LANES_M * LANES_N == 32, "a warp is 32 lanes");
static_assert(WM % (LANES_M * TM) == 0 && WN % (LANES_N * TN) == 0, "the lane tile repeats evenly over the warp tile");
static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles cover the block tile");
static_assert(A_LOADS * THREADS * 4 == BM * BK && B_LOADS * THREADS * 4 == BK * BN, "tiles split evenly over threads");
static_assert(TM == 4 && TN == 4, "a lane's rows and columns are one float4 each");
static_assert((BM + PAD) % 4 == 0, "float4 reads of the a tile stay aligned");
}  // namespace wt

template <int BM, int BN, int BK, int WM, int WN, bool VEC>
__global__ void __launch_bounds__(wt::THREADS, VEC ? wt::MIN_BLOCKS : 1)
sgemm_warptile(int m, int n, int k, const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c)
{
    using namespace wt;
    __shared__ __align__(16) float As[BK][BM + PAD];  // a tile, transposed: As[kk][row]
    __shared__ __align__(16) float Bs[BK][BN];        // b tile: Bs[kk][col]

    // Block order: groups of GROUP_M block-rows, walked column by column inside a group.
    const int grid_m = CEIL_DIV(m, BM), grid_n = CEIL_DIV(n, BN);
    const int per_group = GROUP_M * grid_n;
    const int first_m = (int)blockIdx.x / per_group * GROUP_M;
    const int rows_here = min(grid_m - first_m, GROUP_M);
    const int in_group = (int)blockIdx.x % per_group;
    const int block_m0 = (first_m + in_group % rows_here) * BM;
    const int block_n0 = (in_group / rows_here) * BN;

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int lane_m = lane / LANES_N, lane_n = lane % LANES_N;

    // What this thread fetches: float4 number f = tid + i * THREADS of each tile.
    //   a tile (BM x BK, row-major in global): row f / (BK/4), k offset (f % (BK/4)) * 4
    //   b tile (BK x BN): k row f / (BN/4), column (f % (BN/4)) * 4
    const float* a_tile = a + (size_t)block_m0 * k;
    const float* b_tile = b + block_n0;
    float4 a_stage[A_LOADS], b_stage[B_LOADS];

#define A_ROW(i) ((tid + (i) * THREADS) / (BK / 4))
#define A_KOF(i) (((tid + (i) * THREADS) % (BK / 4)) * 4)
#define B_KROW(i) ((tid + (i) * THREADS) / (BN / 4))
#define B_COL(i) (((tid + (i) * THREADS) % (BN / 4)) * 4)

    // Fetch the k-slice starting at k0 into registers (zeros outside a and b).
    auto fetch = [&](int k0) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int row = A_ROW(i), kk = A_KOF(i);
            const bool row_in = block_m0 + row < m;
            if (VEC) {
                a_stage[i] = row_in && k0 + kk < k ? FETCH_FLOAT4(a_tile[(size_t)row * k + kk])
                                                   : make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                const float* p = a_tile + (size_t)row * k + kk;
                a_stage[i].x = row_in && k0 + kk + 0 < k ? p[0] : 0.f;
                a_stage[i].y = row_in && k0 + kk + 1 < k ? p[1] : 0.f;
                a_stage[i].z = row_in && k0 + kk + 2 < k ? p[2] : 0.f;
                a_stage[i].w = row_in && k0 + kk + 3 < k ? p[3] : 0.f;
            }
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int kr = B_KROW(i), col = B_COL(i);
            const bool k_in = k0 + kr < k;
            if (VEC) {
                b_stage[i] = k_in && block_n0 + col < n ? FETCH_FLOAT4(b_tile[(size_t)kr * n + col])
                                                       : make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                const float* p = b_tile + (size_t)kr * n + col;
                b_stage[i].x = k_in && block_n0 + col + 0 < n ? p[0] : 0.f;
                b_stage[i].y = k_in && block_n0 + col + 1 < n ? p[1] : 0.f;
                b_stage[i].z = k_in && block_n0 + col + 2 < n ? p[2] : 0.f;
                b_stage[i].w = k_in && block_n0 + col + 3 < n ? p[3] : 0.f;
            }
        }
    };
    // Write the staged slice into buffer buf: a transposed, b as it is.
    auto stash = [&](int buf) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int row = A_ROW(i), kk = A_KOF(i);
            As[kk + 0][row] = a_stage[i].x;
            As[kk + 1][row] = a_stage[i].y;
            As[kk + 2][row] = a_stage[i].z;
            As[kk + 3][row] = a_stage[i].w;
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) STORE_FLOAT4(Bs[B_KROW(i)][B_COL(i)], b_stage[i]);
    };

    float acc[WM_ITERS][WN_ITERS][TM][TN];
#pragma unroll
    for (int wm = 0; wm < WM_ITERS; ++wm)
#pragma unroll
        for (int wn = 0; wn < WN_ITERS; ++wn)
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[wm][wn][i][j] = 0.f;

    const int slices = CEIL_DIV(k, BK);

    for (int s = 0; s < slices; ++s) {
        const bool more = s + 1 < slices;
        fetch(s * BK);
        stash(0);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a_frag[WM_ITERS][TM], b_frag[WN_ITERS][TN];
#pragma unroll
            for (int wm = 0; wm < WM_ITERS; ++wm) {
                const float4 v = FETCH_FLOAT4(As[kk][warp_m * WM + wm * (LANES_M * TM) + lane_m * TM]);
                a_frag[wm][0] = v.x; a_frag[wm][1] = v.y; a_frag[wm][2] = v.z; a_frag[wm][3] = v.w;
            }
#pragma unroll
            for (int wn = 0; wn < WN_ITERS; ++wn) {
                const float4 v = FETCH_FLOAT4(Bs[kk][warp_n * WN + wn * (LANES_N * TN) + lane_n * TN]);
                b_frag[wn][0] = v.x; b_frag[wn][1] = v.y; b_frag[wn][2] = v.z; b_frag[wn][3] = v.w;
            }
#pragma unroll
            for (int wm = 0; wm < WM_ITERS; ++wm)
#pragma unroll
                for (int wn = 0; wn < WN_ITERS; ++wn)
#pragma unroll
                    for (int i = 0; i < TM; ++i)
#pragma unroll
                        for (int j = 0; j < TN; ++j) acc[wm][wn][i][j] += a_frag[wm][i] * b_frag[wn][j];
        }
        if (more) {
            a_tile += BK;             // the next k-slice of a: BK columns to the right
            b_tile += (size_t)BK * n; // and of b: BK rows down
        }
        __syncthreads();
    }
#undef A_ROW
#undef A_KOF
#undef B_KROW
#undef B_COL

    // Epilogue: row block_m0 + warp_m*WM + wm*32 + lane_m*4 + i, columns from
    // block_n0 + warp_n*WN + wn*16 + lane_n*4, four at a time.
#pragma unroll
    for (int wm = 0; wm < WM_ITERS; ++wm)
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = block_m0 + warp_m * WM + wm * (LANES_M * TM) + lane_m * TM + i;
            if (row >= m) continue;
#pragma unroll
            for (int wn = 0; wn < WN_ITERS; ++wn) {
                const int col = block_n0 + warp_n * WN + wn * (LANES_N * TN) + lane_n * TN;
                float* dst = c + (size_t)row * n + col;
                if (VEC) {
                    if (col < n)
                        STORE_FLOAT4(*dst, make_float4(acc[wm][wn][i][0], acc[wm][wn][i][1], acc[wm][wn][i][2],
                                                       acc[wm][wn][i][3]));
                } else {
#pragma unroll
                    for (int j = 0; j < TN; ++j)
                        if (col + j < n) dst[j] = acc[wm][wn][i][j];
                }
            }
        }
}

extern "C" void launch(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream)
{
    using namespace wt;
    const long long blocks = (long long)CEIL_DIV(m, BM) * CEIL_DIV(n, BN);
    const bool vec = k % 4 == 0 && n % 4 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
    if (vec)
        sgemm_warptile<BM, BN, BK, WM, WN, true><<<(unsigned)blocks, THREADS, 0, stream>>>(m, n, k, a, b, c);
    else
        sgemm_warptile<BM, BN, BK, WM, WN, false><<<(unsigned)blocks, THREADS, 0, stream>>>(m, n, k, a, b, c);
}
