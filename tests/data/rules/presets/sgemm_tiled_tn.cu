// presets: a shared-memory tiled f32 TN product (C = A^T * B, A stored K x M) on a 16 x 16
// block, constexpr tile, local thread indices, if/else tile loads (register-tile: outer-8x8 fits).
#include <cuda_runtime.h>

constexpr int T = 16;

__global__ void sgemm_tn_tiled(const float *A, const float *B, float *C, int M, int N, int K)
{
    __shared__ float sa[T][T];
    __shared__ float sb[T][T];
    const int ty = threadIdx.y, tx = threadIdx.x;
    const int m = blockIdx.y * T + ty;
    const int n = blockIdx.x * T + tx;
    float dot = 0.0f;
    for (int p0 = 0; p0 < K; p0 += T) {
        sa[ty][tx] = (m < M && p0 + tx < K) ? A[(p0 + tx) * M + m] : 0.0f;
        sb[ty][tx] = (p0 + ty < K && n < N) ? B[(p0 + ty) * N + n] : 0.0f;
        __syncthreads();
        for (int q = 0; q < T; ++q) dot += sa[ty][q] * sb[q][tx];
        __syncthreads();
    }
    if (m < M && n < N) C[m * N + n] = dot;
}

extern "C" void launch(const float *A, const float *B, float *C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(T, T);
    dim3 grid((N + T - 1) / T, (M + T - 1) / T);
    sgemm_tn_tiled<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
