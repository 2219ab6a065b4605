// bf16_gemm_nt, naive: C = A * B^T. The element type is a template parameter (converted to
// float by an overloaded helper) and so is the block edge; launch() instantiates the kernel
// for __nv_bfloat16. One thread per element of C, f32 accumulation, operands from global memory.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T, int EDGE>
__global__ void gemm_nt(const T* A, const T* B, float* C, int M, int N, int K)
{
    const int i = blockIdx.y * EDGE + threadIdx.y;
    const int j = blockIdx.x * EDGE + threadIdx.x;
    if (i < M && j < N) {
        const T* arow = A + (size_t)i * K;
        const T* brow = B + (size_t)j * K;
        float acc = 0.0f;
        for (int p = 0; p < K; p++) acc += to_float(arow[p]) * to_float(brow[p]);
        C[(size_t)i * N + j] = acc;
    }
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K,
                       cudaStream_t stream)
{
    constexpr int edge = 16;
    dim3 block(edge, edge);
    dim3 grid((N + edge - 1) / edge, (M + edge - 1) / edge);
    gemm_nt<__nv_bfloat16, edge><<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
