// test: remove smem-tile@mm_shared:16 | apply smem-tile@mm_shared:15
// A loop over the number of tiles, `if`/`else` loads, an early return after the tiles, the
// tiles in two declarations under a constexpr size.
#include <cuda_runtime.h>

constexpr int T = 32;

__global__ void mm_shared(const float* a, const float* b, float* c, int m, int n, int k)
{
    int ty = threadIdx.y, tx = threadIdx.x;
    int r = blockIdx.y * T + ty;
    int q = blockIdx.x * T + tx;
    if (r >= m || q >= n) return;
    float s = 0.0f;
    for (int kl_k = 0; kl_k < k; kl_k++) s += a[r * k + kl_k] * b[kl_k * n + q];
    c[r * n + q] = s;
}

extern "C" void launch(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream)
{
    mm_shared<<<dim3((n + T - 1) / T, (m + T - 1) / T), dim3(T, T), 0, stream>>>(a, b, c, m, n, k);
}
