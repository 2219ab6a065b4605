// test: remove register-tile@gemm_frag:13
// c = a * b (row-major, f32) with a 2 x 4 register tile per thread and no shared memory; the
// fragments of b are filled element by element, the bounds test written out in each statement (the
// column's offset in two places: the split cannot fold them into one load, so each is guarded by
// its share), a's by a loop.
#include <cuda_runtime.h>
#include <stddef.h>

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
        bf[0] = c0 < n ? b[(size_t)p * n + c0] : 0.f;
        bf[1] = c0 + 1 < n ? b[(size_t)p * n + c0 + 1] : 0.f;
        bf[2] = c0 + 2 < n ? b[(size_t)p * n + c0 + 2] : 0.f;
        bf[3] = c0 + 3 < n ? b[(size_t)p * n + c0 + 3] : 0.f;
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
