// test: apply register-tile@gemm_bf16:15 | remove register-tile@gemm_bf16:14
// bf16 inputs, bf16 shared tiles, f32 accumulation
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define TILE 16

__global__ void gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K)
{
    __shared__ __nv_bfloat16 As[4 * TILE][TILE];
    __shared__ __nv_bfloat16 Bs[TILE][4 * TILE];
    int row = (blockIdx.y * 4) * TILE + threadIdx.y;
    int col = (blockIdx.x * 4) * TILE + threadIdx.x;
    float acc[4][4];
    #pragma unroll
    for (int kl_i = 0; kl_i < 4; kl_i++) {
        #pragma unroll
        for (int kl_j = 0; kl_j < 4; kl_j++) {
            acc[kl_i][kl_j] = 0.0f;
        }
    }
    for (int k0 = 0; k0 < K; k0 += TILE) {
        #pragma unroll
        for (int kl_i = 0; kl_i < 4; kl_i++) {
            As[(threadIdx.y + kl_i * TILE)][threadIdx.x] = ((row + kl_i * TILE) < M && k0 + threadIdx.x < K) ? A[(row + kl_i * TILE) * K + k0 + threadIdx.x] : __float2bfloat16(0.0f);
        }
        #pragma unroll
        for (int kl_j = 0; kl_j < 4; kl_j++) {
            Bs[threadIdx.y][(threadIdx.x + kl_j * TILE)] = (k0 + threadIdx.y < K && (col + kl_j * TILE) < N) ? B[(k0 + threadIdx.y) * N + (col + kl_j * TILE)] : __float2bfloat16(0.0f);
        }
        __syncthreads();
        for (int kk = 0; kk < TILE; kk++) {
            float kl_a[4];
            float kl_b[4];
            #pragma unroll
            for (int kl_i = 0; kl_i < 4; kl_i++) kl_a[kl_i] = __bfloat162float(As[(threadIdx.y + kl_i * TILE)][kk]);
            #pragma unroll
            for (int kl_j = 0; kl_j < 4; kl_j++) kl_b[kl_j] = __bfloat162float(Bs[kk][(threadIdx.x + kl_j * TILE)]);
            #pragma unroll
            for (int kl_i = 0; kl_i < 4; kl_i++)
                #pragma unroll
                for (int kl_j = 0; kl_j < 4; kl_j++) acc[kl_i][kl_j] += kl_a[kl_i] * kl_b[kl_j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int kl_i = 0; kl_i < 4; kl_i++) {
        #pragma unroll
        for (int kl_j = 0; kl_j < 4; kl_j++) {
            if ((row + kl_i * TILE) < M && (col + kl_j * TILE) < N) C[(row + kl_i * TILE) * N + (col + kl_j * TILE)] = acc[kl_i][kl_j];
        }
    }
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid(((N + TILE - 1) / TILE + 3) / 4, ((M + TILE - 1) / TILE + 3) / 4);
    gemm_bf16<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
