// test: remove smem-tile@wt_gemm:38:stash
// a warp-tiled GEMM of our own (double-buffer's staged_bumps after its removal): register staging
// through two lambdas, fetch(k0) from bumped pointers and stash() into tiles (A transposed, its
// coordinates f % BK and f / BK); the tiles become functions of (k0, row, column)
#include <cuda_runtime.h>

#define DIV_UP(a, b) (((a) + (b) - 1) / (b))

constexpr int BM = 64, BN = 64, BK = 8;
constexpr int WM = 32, WN = 32, TM = 4, TN = 4;
constexpr int LM = 4, LN = 8;                      // the lane grid of a warp
constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
constexpr int WMI = WM / (LM * TM), WNI = WN / (LN * TN);
constexpr int AL = BM * BK / NT, BL = BK * BN / NT;

__global__ void wt_gemm(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float sa[BK][BM];   // A tile, k-major
    __shared__ float sb[BK][BN];
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    const int wr = warp / WARPS_N, wc = warp % WARPS_N;
    const int lr = lane / LN, lc = lane % LN;
    const float* pa = A + (size_t)bm * K;
    const float* pb = B + bn;
    float ra[AL], rb[BL];

    auto fetch = [&](int k0) {
        for (int e = 0; e < AL; ++e) {
            const int f = t + e * NT, r = f / BK, c = f % BK;
            ra[e] = bm + r < M && k0 + c < K ? pa[(size_t)r * K + c] : 0.0f;
        }
        for (int e = 0; e < BL; ++e) {
            const int f = t + e * NT, r = f / BN, c = f % BN;
            rb[e] = k0 + r < K && bn + c < N ? pb[(size_t)r * N + c] : 0.0f;
        }
    };
    auto stash = [&](int buf) {
        for (int e = 0; e < AL; ++e) {
            const int f = t + e * NT;
            sa[f % BK][f / BK] = ra[e];
        }
        for (int e = 0; e < BL; ++e) {
            const int f = t + e * NT;
            sb[f / BN][f % BN] = rb[e];
        }
    };

    float acc[WMI][WNI][TM][TN];
    for (int x = 0; x < WMI; ++x)
        for (int y = 0; y < WNI; ++y)
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j) acc[x][y][i][j] = 0.0f;

    const int slices = DIV_UP(K, BK);
    for (int s = 0; s < slices; ++s) {
        const bool more = s + 1 < slices;
        fetch(s * BK);
        stash(0);
        __syncthreads();
        for (int kk = 0; kk < BK; ++kk)
            for (int x = 0; x < WMI; ++x)
                for (int y = 0; y < WNI; ++y)
                    for (int i = 0; i < TM; ++i)
                        for (int j = 0; j < TN; ++j)
                            acc[x][y][i][j] += sa[kk][wr * WM + x * LM * TM + lr * TM + i] *
                                               sb[kk][wc * WN + y * LN * TN + lc * TN + j];
        if (more) {
            pa += BK;
            pb += (size_t)BK * N;
        }
        __syncthreads();
    }

    for (int x = 0; x < WMI; ++x)
        for (int i = 0; i < TM; ++i) {
            const int row = bm + wr * WM + x * LM * TM + lr * TM + i;
            if (row >= M) continue;
            for (int y = 0; y < WNI; ++y)
                for (int j = 0; j < TN; ++j) {
                    const int col = bn + wc * WN + y * LN * TN + lc * TN + j;
                    if (col < N) C[(size_t)row * N + col] = acc[x][y][i][j];
                }
        }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    const dim3 grid(DIV_UP(N, BN), DIV_UP(M, BM));
    wt_gemm<<<grid, NT, 0, stream>>>(A, B, C, M, N, K);
}
