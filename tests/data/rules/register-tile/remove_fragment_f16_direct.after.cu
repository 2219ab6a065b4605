// test: remove register-tile@gemm_ring:29
// f16 warp-fragment GEMM in another style: one stage loaded element-wise by a non-template
// helper, flat shared arrays, direct guarded stores of each accumulator element
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define TB 32
#define TK 16
#define NSTAGE 3

__device__ void fetch(__half* sa, __half* sb, const __half* A, const __half* B, int M, int N, int K, int m0, int n0, int k0)
{
    for (int i = threadIdx.x; i < TB * TK; i += 64) {
        const int r = i / TK, kk = i % TK;
        sa[r * TK + kk] = (m0 + r < M && k0 + kk < K) ? A[(size_t)(m0 + r) * K + k0 + kk] : __float2half(0.0f);
    }
    for (int i = threadIdx.x; i < TK * TB; i += 64) {
        const int kk = i / TB, c = i % TB;
        sb[kk * TB + c] = (k0 + kk < K && n0 + c < N) ? B[(size_t)(k0 + kk) * N + n0 + c] : __float2half(0.0f);
    }
}

__global__ void gemm_ring(const __half* A, const __half* B, __half* C, int M, int N, int K)
{
    // smem-tile: 16 x 16 tiles of A and B in shared memory (one output per thread)
    __shared__ __half As[16][16];
    __shared__ __half Bs[16][16];
    const int row = blockIdx.y * 16 + threadIdx.y;
    const int col = blockIdx.x * 16 + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        As[threadIdx.y][threadIdx.x] = row < M && k0 + threadIdx.x < K ? A[(size_t)row * K + (k0 + threadIdx.x)] : __half(0.0f);
        Bs[threadIdx.y][threadIdx.x] = k0 + threadIdx.y < K && col < N ? B[(size_t)(k0 + threadIdx.y) * N + col] : __half(0.0f);
        __syncthreads();
        for (int kk = 0; kk < 16; kk++) {
            acc += __half2float(As[threadIdx.y][kk]) * __half2float(Bs[kk][threadIdx.x]);
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        C[(size_t)row * N + col] = __float2half(acc);
    }
}

extern "C" void launch(const __half* A, const __half* B, __half* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    gemm_ring<<<grid, dim3(16, 16), 0, stream>>>(A, B, C, M, N, K);
}
