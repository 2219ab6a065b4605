// test: apply double-buffer@gemm_t:16 | remove double-buffer@gemm_t:22
// bf16 tiles, a loop over tile indices, f32 accumulation
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define TILE 16

__global__ void gemm_t(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K)
{
    __shared__ __nv_bfloat16 As[2][TILE][TILE];
    __shared__ __nv_bfloat16 Bs[2][TILE][TILE];
    const int ty = threadIdx.y, tx = threadIdx.x;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const int tiles = (K + TILE - 1) / TILE;
    float acc = 0.0f;
    {
        const int t = 0;
        As[0][ty][tx] = (row < M && t * TILE + tx < K) ? A[row * K + t * TILE + tx] : __float2bfloat16(0.0f);
        Bs[0][ty][tx] = (t * TILE + ty < K && col < N) ? B[(t * TILE + ty) * N + col] : __float2bfloat16(0.0f);
    }
    __syncthreads();
    for (int t = 0; t < tiles; t++) {
        const int kl_cur = t & 1;
        __nv_bfloat16 kl_r0;
        __nv_bfloat16 kl_r1;
        if ((t + 1) < tiles) {
            kl_r0 = (row < M && (t + 1) * TILE + tx < K) ? A[row * K + (t + 1) * TILE + tx] : __float2bfloat16(0.0f);
            kl_r1 = ((t + 1) * TILE + ty < K && col < N) ? B[((t + 1) * TILE + ty) * N + col] : __float2bfloat16(0.0f);
        }
        for (int kk = 0; kk < TILE; kk++) {
            acc += __bfloat162float(As[kl_cur][ty][kk]) * __bfloat162float(Bs[kl_cur][kk][tx]);
        }
        if ((t + 1) < tiles) {
            As[kl_cur ^ 1][ty][tx] = kl_r0;
            Bs[kl_cur ^ 1][ty][tx] = kl_r1;
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
