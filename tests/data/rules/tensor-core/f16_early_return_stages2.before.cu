// test: apply tensor-core@hgemm_f16:12 warps_m=4 warps_n=1 bk=64 stages=2 | remove tensor-core@hgemm_f16:79
// An f16 GEMM with an early return and an inline launch: two 64-deep stages, the dynamic shared memory added to the launch.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

__global__ void hgemm_f16(const __half* A, const __half* B, __half* C, int M, int N, int K, float alpha)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += __half2float(A[row * K + k]) * __half2float(B[k * N + col]);
    }
    C[row * N + col] = __float2half(alpha * acc);
}

void run(const __half* A, const __half* B, __half* C, int M, int N, int K, cudaStream_t s)
{
    hgemm_f16<<<dim3((N + 15) / 16, (M + 15) / 16), dim3(16, 16), 0, s>>>(A, B, C, M, N, K, 2.0f);
}
