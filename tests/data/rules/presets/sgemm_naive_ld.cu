// presets: a naive f32 product with leading dimensions and a 16 x 16 block: a GEMM site of
// smem-tile, where the stencil presets are not proposed (they are for stencils).
#include <cuda_runtime.h>

__global__ void sgemm_ld(const float *A, int lda, const float *B, int ldb, float *C, int ldc, int M, int N, int K)
{
    int i = blockIdx.y * 16 + threadIdx.y;
    int j = blockIdx.x * 16 + threadIdx.x;
    if (i < M && j < N) {
        float acc = 0.0f;
        for (int p = 0; p < K; p++) acc += A[i * lda + p] * B[p * ldb + j];
        C[i * ldc + j] = acc;
    }
}

extern "C" void launch(const float *A, const float *B, float *C, int M, int N, int K, cudaStream_t stream)
{
    sgemm_ld<<<dim3((N + 15) / 16, (M + 15) / 16), dim3(16, 16), 0, stream>>>(A, K, B, N, C, N, M, N, K);
}
