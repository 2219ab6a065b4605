// test: apply tensor-core@tgemm:13 warps_n=4 frags_m=2 stages=2 | remove tensor-core@tgemm:80
// A GEMM templated on its 16-bit element type, two stages.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

template <typename T>
__global__ void tgemm(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            acc += static_cast<float>(A[row * K + k]) * static_cast<float>(B[k * N + col]);
        }
        C[row * N + col] = static_cast<T>(acc);
    }
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                       cudaStream_t stream)
{
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    tgemm<__nv_bfloat16><<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
