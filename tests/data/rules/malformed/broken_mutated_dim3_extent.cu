// malformed: a mutation of another test kernel (issue 18: --list dereferenced a null launch function)
// test: apply smem-tile@gemm_bf16:15 | remove smem-tile@gemm_bf16:17
// bf16 operands with f32 accumulation, size_t indices, an early return for threads outside C
// (moved after the tiles so that every thread reaches the barriers), a 32 x 32 block.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

constexpr int TS = 32;

__global__ void gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K)
{
    const size_t row = (size_t)blockIdx.y * blockDim.y + threadIdx.y;
    const size_t col = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= (size_t)M || col >= ( (size_t)N) return;
    float acc = 0.0f;
    for (size_t k = 0; k < (size_t)K; ++k)
        acc += __bfloat162float(A[row * K + k]) * __bfloat162float(B[k * N + col]);
    C[row * N + col] = __float2bfloat16(acc);
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
{
    dim3 grid((N + TS - 1) / TS, (M + TS - 1) / TS);
    gemm_bf16<<<grid, dim3(TS, TS), 0, stream>>>(A, B, C, M, N, K);
}
