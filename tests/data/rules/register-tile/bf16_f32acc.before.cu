// test: apply register-tile@gemm_bf16:15 | remove register-tile@gemm_bf16:14
// bf16 inputs, bf16 shared tiles, f32 accumulation
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define TILE 16

__global__ void gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K)
{
    __shared__ __nv_bfloat16 As[TILE][TILE];
    __shared__ __nv_bfloat16 Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : __float2bfloat16(0.0f);
        Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && col < N) ? B[(k0 + threadIdx.y) * N + col] : __float2bfloat16(0.0f);
        __syncthreads();
        for (int kk = 0; kk < TILE; kk++) {
            acc += __bfloat162float(As[threadIdx.y][kk]) * __bfloat162float(Bs[kk][threadIdx.x]);
        }
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    gemm_bf16<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
