// test: remove double-buffer@gemm_lambda:28
// the expert's shape (tasks/sgemm/expert.cu): lambdas load into registers and store a stage,
// a stage index cur = kt & 1, one barrier per tile
#include <cuda_runtime.h>

#define TILE 16

__global__ void gemm_lambda(const float* A, const float* B, float* C, int M, int N, int K)
{
    // double-buffer: two stages
    __shared__ float As[2][TILE][TILE];
    __shared__ float Bs[2][TILE][TILE];
    const int ty = threadIdx.y, tx = threadIdx.x;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float ra, rb, acc = 0.0f;
    auto load_tiles = [&](int kt) {
        ra = (row < M && kt * TILE + tx < K) ? A[row * K + kt * TILE + tx] : 0.0f;
        rb = (kt * TILE + ty < K && col < N) ? B[(kt * TILE + ty) * N + col] : 0.0f;
    };
    auto store_tiles = [&](int buf) {
        As[buf][ty][tx] = ra;
        Bs[buf][ty][tx] = rb;
    };
    const int k_tiles = (K + TILE - 1) / TILE;
    load_tiles(0);
    store_tiles(0);
    __syncthreads();
    for (int kt = 0; kt < k_tiles; kt++) {
        const int cur = kt & 1;
        // double-buffer: fetch the next tile while this one is used
        if (kt + 1 < k_tiles) load_tiles(kt + 1);
        for (int kk = 0; kk < TILE; kk++) acc += As[cur][ty][kk] * Bs[cur][kk][tx];
        // the other stage is free since the last barrier
        if (kt + 1 < k_tiles) store_tiles(cur ^ 1);
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
