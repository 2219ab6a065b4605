// C = A * B with a one-dimensional launch of TILE * TILE threads per block, each thread finding its
// row and column of the block's TILE x TILE tile of C by dividing its thread index by TILE.
#include <cuda_runtime.h>

#define TILE 16

__global__ void matmul_flat_block(const float *A, const float *B, float *C, int M, int N, int K)
{
    const int r = blockIdx.y * TILE + threadIdx.x / TILE;
    const int c = blockIdx.x * TILE + threadIdx.x % TILE;
    if (r >= M || c >= N) return;
    float sum = 0.0f;
    for (int i = 0; i < K; ++i) sum += A[r * K + i] * B[i * N + c];
    C[r * N + c] = sum;
}

extern "C" void launch(const float *A, const float *B, float *C, int M, int N, int K, cudaStream_t stream)
{
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_flat_block<<<grid, TILE * TILE, 0, stream>>>(A, B, C, M, N, K);
}
