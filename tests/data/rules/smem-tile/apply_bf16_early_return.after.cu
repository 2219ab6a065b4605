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
    // smem-tile: TS x TS tiles of A and B in shared memory
    __shared__ __nv_bfloat16 As[TS][TS];
    __shared__ __nv_bfloat16 Bs[TS][TS];
    float acc = 0.0f;
    for (size_t k0 = 0; k0 < (size_t)K; k0 += TS) {
        As[threadIdx.y][threadIdx.x] = row < (size_t)M && k0 + threadIdx.x < (size_t)K ? A[row * K + (k0 + threadIdx.x)] : __nv_bfloat16(0.0f);
        Bs[threadIdx.y][threadIdx.x] = k0 + threadIdx.y < (size_t)K && col < (size_t)N ? B[(k0 + threadIdx.y) * N + col] : __nv_bfloat16(0.0f);
        __syncthreads();
        for (size_t kk = 0; kk < TS; kk++) acc += __bfloat162float(As[threadIdx.y][kk]) * __bfloat162float(Bs[kk][threadIdx.x]);
        __syncthreads();
    }
    if (row >= (size_t)M || col >= (size_t)N) return;
    C[row * N + col] = __float2bfloat16(acc);
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                       cudaStream_t stream)
{
    dim3 grid((N + TS - 1) / TS, (M + TS - 1) / TS);
    gemm_bf16<<<grid, dim3(TS, TS), 0, stream>>>(A, B, C, M, N, K);
}
