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
    // register-tile: this block's share of acc's dimension 2 (extent 4)
    const int kl_s2 = (int)(blockIdx.z / 2 % 4);
    // register-tile: this block's share of acc's dimension 1 (extent 2)
    const int kl_s = (int)(blockIdx.z / 1 % 2);
    const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    // register-tile: one output per thread: a thread whose output lies outside the result returns here, and its loads test its row and column no more
    if (!(r0 + kl_s < m && c0 + kl_s2 < n)) return;

    float acc[1][1];
    for (int i = kl_s; i < kl_s + 1; ++i)
        for (int j = kl_s2; j < kl_s2 + 1; ++j) acc[0][0] = 0.f;
    for (int p = 0; p < k; ++p) {
        float af[1], bf[1];
        for (int i = kl_s; i < kl_s + 1; ++i) af[0] = a[(size_t)(r0 + i) * k + p];
        if (kl_s2 == 0) bf[0] = c0 < n ? b[(size_t)p * n + c0] : 0.f;
        if (kl_s2 == 1) bf[0] = c0 + 1 < n ? b[(size_t)p * n + c0 + 1] : 0.f;
        if (kl_s2 == 2) bf[0] = c0 + 2 < n ? b[(size_t)p * n + c0 + 2] : 0.f;
        if (kl_s2 == 3) bf[0] = c0 + 3 < n ? b[(size_t)p * n + c0 + 3] : 0.f;
        for (int i = kl_s; i < kl_s + 1; ++i)
            for (int j = kl_s2; j < kl_s2 + 1; ++j) acc[0][0] += af[0] * bf[0];
    }
    for (int i = kl_s; i < kl_s + 1; ++i)
        for (int j = kl_s2; j < kl_s2 + 1; ++j)
            if (r0 + i < m && c0 + j < n) c[(size_t)(r0 + i) * n + c0 + j] = acc[0][0];
}

extern "C" void launch(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream)
{
    const dim3 block(16, 16);
    const dim3 grid((n + 63) / 64, (m + 31) / 32, 2 * 4);
    gemm_frag<<<grid, block, 0, stream>>>(a, b, c, m, n, k);
}
