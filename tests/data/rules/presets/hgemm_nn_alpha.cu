// presets: a bf16 NN product with an alpha/beta epilogue into an f32 C, size_t indices, an early
// return of the threads outside C, sizes passed at run time (tensor-core: every preset fits).
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void gemm_bf16_ab(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C, int M, int N, int K,
                             float alpha, float beta)
{
    size_t r = (size_t)blockIdx.y * blockDim.y + threadIdx.y;
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M || c >= N) return;
    float acc = 0.0f;
    for (int kk = 0; kk < K; kk++) acc += __bfloat162float(A[r * K + kk]) * __bfloat162float(B[(size_t)kk * N + c]);
    C[r * N + c] = alpha * acc + beta * C[r * N + c];
}

extern "C" void launch(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C, int M, int N, int K,
                       cudaStream_t stream)
{
    dim3 threads(16, 16);
    dim3 blocks((N + 15) / 16, (M + 15) / 16);
    gemm_bf16_ab<<<blocks, threads, 0, stream>>>(A, B, C, M, N, K, 1.0f, 0.0f);
}
