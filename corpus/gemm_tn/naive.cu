// gemm_tn, naive: out = lhs^T * rhs. The tile shape is a pair of template parameters; the grid
// is one-dimensional (tile index = blockIdx.x, split into a tile row and a tile column), each
// thread computes one element of out from global memory.
#include <cuda_runtime.h>

template <int BLOCK_M, int BLOCK_N>
__global__ void gemm_tn_kernel(const float* lhs, const float* rhs, float* out, int M, int N, int K)
{
    const int tiles_n = (N + BLOCK_N - 1) / BLOCK_N;
    const int tile_m = blockIdx.x / tiles_n;
    const int tile_n = blockIdx.x % tiles_n;
    const int row = tile_m * BLOCK_M + threadIdx.x / BLOCK_N;
    const int col = tile_n * BLOCK_N + threadIdx.x % BLOCK_N;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int kk = 0; kk < K; ++kk) acc += lhs[kk * M + row] * rhs[kk * N + col];
        out[row * N + col] = acc;
    }
}

extern "C" void launch(const float* lhs, const float* rhs, float* out, int M, int N, int K, cudaStream_t stream)
{
    constexpr int BM = 8, BN = 32;
    const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    gemm_tn_kernel<BM, BN><<<tiles, BM * BN, 0, stream>>>(lhs, rhs, out, M, N, K);
}
