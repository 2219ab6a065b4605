// test: apply double-buffer@gemm_t:16 | remove double-buffer@gemm_t:22
// bf16 tiles, a loop over tile indices, f32 accumulation
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define TILE 16

__global__ void gemm_t(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K)
{
    __shared__ __nv_bfloat16 As[TILE][TILE];
    __shared__ __nv_bfloat16 Bs[TILE][TILE];
    const int ty = threadIdx.y, tx = threadIdx.x;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const int tiles = (K + TILE - 1) / TILE;
    float acc = 0.0f;
    for (int t = 0; t < tiles; t++) {
        As[ty][tx] = (row < M && t * TILE + tx < K) ? A[row * K + t * TILE + tx] : __float2bfloat16(0.0f);
        Bs[ty][tx] = (t * TILE + ty < K && col < N) ? B[(t * TILE + ty) * N + col] : __float2bfloat16(0.0f);
        __syncthreads();
        for (int kk = 0; kk < TILE; kk++) {
            acc += __bfloat162float(As[ty][kk]) * __bfloat162float(Bs[kk][tx]);
        }
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    gemm_t<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
