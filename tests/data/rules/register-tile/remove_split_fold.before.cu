// test: remove register-tile@gemm_frag:17
// c = a * b (row-major, f32) with a 2 x 4 register tile per thread and no shared memory; the
// fragments of b are filled element by element through a bounds-checked helper, one statement per
// column (as the removal of a float4 load leaves them), a's by a loop.
#include <cuda_runtime.h>
#include <stddef.h>

__device__ __forceinline__ float load_b(const float* b, int p, int n, int col)
{
    return col < n ? b[(size_t)p * n + col] : 0.f;
}

__global__ void gemm_frag(const float* a, const float* b, float* c, int m, int n, int k)
{
    const int r0 = (blockIdx.y * blockDim.y + threadIdx.y) * 2;
    const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    float acc[2][4];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
    for (int p = 0; p < k; ++p) {
        float af[2], bf[4];
        for (int i = 0; i < 2; ++i) af[i] = r0 + i < m ? a[(size_t)(r0 + i) * k + p] : 0.f;
        bf[0] = load_b(b, p, n, c0);
        bf[1] = load_b(b, p, n, c0 + 1);
        bf[2] = load_b(b, p, n, c0 + 2);
        bf[3] = load_b(b, p, n, c0 + 3);
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 4; ++j) acc[i][j] += af[i] * bf[j];
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j)
            if (r0 + i < m && c0 + j < n) c[(size_t)(r0 + i) * n + c0 + j] = acc[i][j];
}

extern "C" void launch(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream)
{
    const dim3 block(16, 16);
    const dim3 grid((n + 63) / 64, (m + 31) / 32);
    gemm_frag<<<grid, block, 0, stream>>>(a, b, c, m, n, k);
}
