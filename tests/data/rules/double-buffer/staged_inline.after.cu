// test: remove double-buffer@wt_gemm:56
// the stage written inline: the tiles read at [s & 1], the store into stage (s + 1) & 1, no stage
// index local, no pointer bumps (the fetch indexes A and B by k0), #pragma unroll on the loops
#include <cuda_runtime.h>

#define DIV_UP(a, b) (((a) + (b) - 1) / (b))

constexpr int BM = 64, BN = 64, BK = 8;
constexpr int WM = 32, WN = 32, TM = 4, TN = 4;
constexpr int LM = 4, LN = 8;                      // the lane grid of a warp
constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
constexpr int WMI = WM / (LM * TM), WNI = WN / (LN * TN);
constexpr int AL = BM * BK / NT, BL = BK * BN / NT;

__global__ void __launch_bounds__(NT) wt_gemm(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float sa[BK][BM];   // A tile, k-major
    __shared__ float sb[BK][BN];
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    const int wr = warp / WARPS_N, wc = warp % WARPS_N;
    const int lr = lane / LN, lc = lane % LN;
    float ra[AL], rb[BL];

    auto fetch = [&](int k0) {
        for (int e = 0; e < AL; ++e) {
            const int f = t + e * NT, r = f / BK, c = f % BK;
            ra[e] = bm + r < M && k0 + c < K ? A[(size_t)(bm + r) * K + k0 + c] : 0.0f;
        }
        for (int e = 0; e < BL; ++e) {
            const int f = t + e * NT, r = f / BN, c = f % BN;
            rb[e] = k0 + r < K && bn + c < N ? B[(size_t)(k0 + r) * N + bn + c] : 0.0f;
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
        fetch(s * BK);
        stash(0);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk)
            for (int x = 0; x < WMI; ++x)
                for (int y = 0; y < WNI; ++y)
                    for (int i = 0; i < TM; ++i)
                        for (int j = 0; j < TN; ++j)
                            acc[x][y][i][j] += sa[kk][wr * WM + x * LM * TM + lr * TM + i] *
                                               sb[kk][wc * WN + y * LN * TN + lc * TN + j];
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
