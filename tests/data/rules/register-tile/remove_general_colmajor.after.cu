// test: remove register-tile@gemm_cm:9
// column-major operands (A is K x M, C is N x M), a 1-D block, early skips and a size_t store
#include <cuda_runtime.h>

constexpr int TB = 32, TKK = 8, TT = 2;

__global__ void gemm_cm(const float* At, const float* B, float* Ct, int m, int n, int k)
{
    // smem-tile: 16 x 16 tiles of At and B in shared memory (one output per thread)
    __shared__ float As[16][16];
    __shared__ float Bs[16][16];
    const int row = blockIdx.y * 16 + threadIdx.y;
    const int col = blockIdx.x * 16 + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < k; k0 += 16) {
        As[threadIdx.y][threadIdx.x] = row < m && k0 + threadIdx.x < k ? At[(k0 + threadIdx.x) * m + row] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = k0 + threadIdx.y < k && col < n ? B[(k0 + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < 16; kk++) {
            acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < m && col < n) {
        Ct[(size_t)col * m + row] = acc;
    }
}

extern "C" void launch(const float* At, const float* B, float* Ct, int m, int n, int k, cudaStream_t stream)
{
    const dim3 grid((n + 15) / 16, (m + 15) / 16);
    gemm_cm<<<grid, dim3(16, 16), 0, stream>>>(At, B, Ct, m, n, k);
}
