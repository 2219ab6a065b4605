// test: apply tensor-core@bgemm:15 frags_m=2 frags_n=2 | remove tensor-core@bgemm:26
// Batched bf16 GEMM: the batch comes from blockIdx.z, indices are size_t, B is K x N column-major.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void bgemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K)
{
    const size_t batch = blockIdx.z;
    const __nv_bfloat16* Ab = A + batch * M * K;
    const __nv_bfloat16* Bb = B + batch * K * N;
    size_t row = blockIdx.y * blockDim.y + threadIdx.y;
    size_t col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (size_t k = 0; k < K; k++) {
            acc += __bfloat162float(Ab[row * K + k]) * __bfloat162float(Bb[col * K + k]);
        }
        C[batch * M * N + row * N + col] = __float2bfloat16(acc);
    }
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                       int batches, cudaStream_t stream)
{
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16, batches);
    bgemm<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
