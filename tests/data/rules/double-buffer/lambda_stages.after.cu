// test: remove double-buffer@gemm_lambda:28
// the expert's shape (tasks/sgemm/expert.cu): lambdas load into registers and store a stage,
// a stage index cur = kt & 1, one barrier per tile
#include <cuda_runtime.h>

#define TILE 16

__global__ void gemm_lambda(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int ty = threadIdx.y, tx = threadIdx.x;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float ra, rb, acc = 0.0f;
    auto load_tiles = [&](int kt) {
        ra = (row < M && kt * TILE + tx < K) ? A[row * K + kt * TILE + tx] : 0.0f;
        rb = (kt * TILE + ty < K && col < N) ? B[(kt * TILE + ty) * N + col] : 0.0f;
    };
    auto store_tiles = [&](int buf) {
        As[ty][tx] = ra;
        Bs[ty][tx] = rb;
    };
    const int k_tiles = (K + TILE - 1) / TILE;
    for (int kt = 0; kt < k_tiles; kt++) {
        load_tiles(kt);
        store_tiles(0);
        __syncthreads();
        for (int kk = 0; kk < TILE; kk++) acc += As[ty][kk] * Bs[kk][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    gemm_lambda<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
