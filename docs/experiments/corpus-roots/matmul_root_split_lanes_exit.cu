// docs/experiments/corpus-roots (2026-12-04, fifth session): matmul_root_split_lanes.cu with an early return of the threads whose output lies outside c, and the
// lambdas' row and column tests gone (the k test kept).
// See README.md here for the measurements and the commands.
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
__global__ void sgemm_warptile(int m, int n, int k, const float* a, const float* b, float* c)
{
    using namespace wt;

    // register-tile: this thread's share of acc's dimension 4 (extent 4)
    const int kl_s4 = (int)(threadIdx.x % 4);
    // register-tile: the thread that held this thread's outputs before the split (it stands for threadIdx.x below): consecutive threads store consecutive outputs
    const unsigned kl_t = threadIdx.x / 4 + (int)(blockIdx.y / 16 % 4) * 64;
    // register-tile: this block's share of acc's dimension 3 (extent 4)
    const int kl_s3 = (int)(blockIdx.y / 4 % 4);
    // register-tile: this block's share of acc's dimension 2 (extent 2)
    const int kl_s2 = (int)(blockIdx.y / 2 % 2);
    // register-tile: this block's share of acc's dimension 1 (extent 2)
    const int kl_s = (int)(blockIdx.y / 1 % 2);
    // Block order: groups of GROUP_M block-rows, walked column by column inside a group.
    const int grid_m = CEIL_DIV(m, BM), grid_n = CEIL_DIV(n, BN);
    const int per_group = GROUP_M * grid_n;
    const int first_m = (int)blockIdx.x / per_group * GROUP_M;
    const int rows_here = min(grid_m - first_m, GROUP_M);
    const int in_group = (int)blockIdx.x % per_group;
    const int block_m0 = (first_m + in_group % rows_here) * BM;
    const int block_n0 = (in_group / rows_here) * BN;

    const int tid = kl_t;
    const int warp = tid / 32, lane = tid % 32;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int lane_m = lane / LANES_N, lane_n = lane % LANES_N;

    // What this thread fetches: float4 number f = tid + i * THREADS of each tile.
    //   a tile (BM x BK, row-major in global): row f / (BK/4), k offset (f % (BK/4)) * 4
    //   b tile (BK x BN): k row f / (BN/4), column (f % (BN/4)) * 4
    const float* a_tile = a + (size_t)block_m0 * k;
    const float* b_tile = b + block_n0;

#define A_ROW(i) ((tid + (i) * THREADS) / (BK / 4))
#define A_KOF(i) (((tid + (i) * THREADS) % (BK / 4)) * 4)
#define B_KROW(i) ((tid + (i) * THREADS) / (BN / 4))
#define B_COL(i) (((tid + (i) * THREADS) % (BN / 4)) * 4)

    // by hand: a thread whose one output lies outside c returns at once; the tiles' rows and columns it reads are then inside
    if (block_m0 + warp_m * WM + kl_s * (LANES_M * TM) + lane_m * TM + kl_s3 >= m ||
        block_n0 + warp_n * WN + kl_s2 * (LANES_N * TN) + lane_n * TN + kl_s4 >= n)
        return;
    auto As = [&](int k0, int kl_p, int kl_q) -> float { return k0 + kl_p + 0 < k ? (a_tile + (size_t)kl_q * k + kl_p)[0] : 0.f; };
    auto Bs = [&](int k0, int kl_p, int kl_q) -> float { return (k0 + kl_p < k) ? (b_tile + (size_t)kl_p * n + kl_q)[0] : 0.f; };

    float acc[1][1][1][1];
    for (int wm = kl_s; wm < kl_s + 1; ++wm)
        for (int wn = kl_s2; wn < kl_s2 + 1; ++wn)
            for (int i = kl_s3; i < kl_s3 + 1; ++i)
                for (int j = kl_s4; j < kl_s4 + 1; ++j) acc[0][0][0][0] = 0.f;

    const int slices = CEIL_DIV(k, BK);

    for (int s = 0; s < slices; ++s) {
        const bool more = s + 1 < slices;
        for (int kk = 0; kk < BK; ++kk) {
            float a_frag[1][1], b_frag[1][1];
            for (int wm = kl_s; wm < kl_s + 1; ++wm) {
                a_frag[0][0] = As(s * BK, kk, warp_m * WM + wm * (LANES_M * TM) + lane_m * TM + kl_s3);
            }
            for (int wn = kl_s2; wn < kl_s2 + 1; ++wn) {
                b_frag[0][0] = Bs(s * BK, kk, warp_n * WN + wn * (LANES_N * TN) + lane_n * TN + kl_s4);
            }
            for (int wm = kl_s; wm < kl_s + 1; ++wm)
                for (int wn = kl_s2; wn < kl_s2 + 1; ++wn)
                    for (int i = kl_s3; i < kl_s3 + 1; ++i)
                        for (int j = kl_s4; j < kl_s4 + 1; ++j) acc[0][0][0][0] += a_frag[0][0] * b_frag[0][0];
        }
        if (more) {
            a_tile += BK;             // the next k-slice of a: BK columns to the right
            b_tile += (size_t)BK * n; // and of b: BK rows down
        }
    }
#undef A_ROW
#undef A_KOF
#undef B_KROW
#undef B_COL

    // Epilogue: row block_m0 + warp_m*WM + wm*32 + lane_m*4 + i, columns from
    // block_n0 + warp_n*WN + wn*16 + lane_n*4, four at a time.
    for (int wm = kl_s; wm < kl_s + 1; ++wm)
        for (int i = kl_s3; i < kl_s3 + 1; ++i) {
            const int row = block_m0 + warp_m * WM + wm * (LANES_M * TM) + lane_m * TM + i;
            if (row >= m) continue;
            for (int wn = kl_s2; wn < kl_s2 + 1; ++wn) {
                const int col = block_n0 + warp_n * WN + wn * (LANES_N * TN) + lane_n * TN;
                float* dst = c + (size_t)row * n + col;
                {
                    for (int j = kl_s4; j < kl_s4 + 1; ++j)
                        if (col + j < n) dst[j] = acc[0][0][0][0];
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
        sgemm_warptile<BM, BN, BK, WM, WN, true><<<dim3((unsigned)blocks, 2 * 2 * 4 * 4), THREADS, 0, stream>>>(m, n, k, a, b, c);
    else
        sgemm_warptile<BM, BN, BK, WM, WN, false><<<dim3((unsigned)blocks, 2 * 2 * 4 * 4), THREADS, 0, stream>>>(m, n, k, a, b, c);
}
