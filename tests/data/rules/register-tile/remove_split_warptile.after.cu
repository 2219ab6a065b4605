// test: remove register-tile@wt_gemm:29
// our warp-tiled GEMM after smem-tile (smem-tile/remove_lambda_warptile): no shared memory left, so the
// 2 x 1 x 4 x 4 tile splits over blocks: each dimension (WMI, TM, TN) goes to blockIdx.z (the kernel
// uses y) and shrinks to 1, the loops over it run for the block's share only: one output per thread
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
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    // register-tile: this block's share of acc's dimension 4 (extent 4)
    const int kl_s3 = (int)(blockIdx.z / 8 % 4);
    // register-tile: this block's share of acc's dimension 3 (extent 4)
    const int kl_s2 = (int)(blockIdx.z / 2 % 4);
    // register-tile: this block's share of acc's dimension 1 (extent 2)
    const int kl_s = (int)(blockIdx.z / 1 % 2);
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    const int wr = warp / WARPS_N, wc = warp % WARPS_N;
    const int lr = lane / LN, lc = lane % LN;
    const float* pa = A + (size_t)bm * K;
    const float* pb = B + bn;

    // smem-tile: the tiles' elements read from global memory where the compute uses them
    auto sa = [&](int k0, int kl_p, int kl_q) -> float { return bm + kl_q < M && k0 + kl_p < K ? pa[(size_t)kl_q * K + kl_p] : 0.0f; };
    auto sb = [&](int k0, int kl_p, int kl_q) -> float { return k0 + kl_p < K && bn + kl_q < N ? pb[(size_t)kl_p * N + kl_q] : 0.0f; };

    float acc[1][WNI][1][1];
    for (int x = kl_s; x < kl_s + 1; ++x)
        for (int y = 0; y < WNI; ++y)
            for (int i = kl_s2; i < kl_s2 + 1; ++i)
                for (int j = kl_s3; j < kl_s3 + 1; ++j) acc[0][y][0][0] = 0.0f;

    const int slices = DIV_UP(K, BK);
    for (int s = 0; s < slices; ++s) {
        const bool more = s + 1 < slices;
        for (int kk = 0; kk < BK; ++kk)
            for (int x = kl_s; x < kl_s + 1; ++x)
                for (int y = 0; y < WNI; ++y)
                    for (int i = kl_s2; i < kl_s2 + 1; ++i)
                        for (int j = kl_s3; j < kl_s3 + 1; ++j)
                            acc[0][y][0][0] += sa(s * BK, kk, wr * WM + x * LM * TM + lr * TM + i) *
                                               sb(s * BK, kk, wc * WN + y * LN * TN + lc * TN + j);
        if (more) {
            pa += BK;
            pb += (size_t)BK * N;
        }
    }

    for (int x = kl_s; x < kl_s + 1; ++x)
        for (int i = kl_s2; i < kl_s2 + 1; ++i) {
            const int row = bm + wr * WM + x * LM * TM + lr * TM + i;
            if (row >= M) continue;
            for (int y = 0; y < WNI; ++y)
                for (int j = kl_s3; j < kl_s3 + 1; ++j) {
                    const int col = bn + wc * WN + y * LN * TN + lc * TN + j;
                    if (col < N) C[(size_t)row * N + col] = acc[0][y][0][0];
                }
        }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    const dim3 grid(DIV_UP(N, BN), DIV_UP(M, BM), 2 * 4 * 4);
    wt_gemm<<<grid, NT, 0, stream>>>(A, B, C, M, N, K);
}
