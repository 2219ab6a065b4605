// test: remove smem-tile@mm_shared:16 | apply smem-tile@mm_shared:15
// A loop over the number of tiles, `if`/`else` loads, an early return after the tiles, the
// tiles in two declarations under a constexpr size.
#include <cuda_runtime.h>

constexpr int T = 32;

__global__ void mm_shared(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ float sa[T][T];
    __shared__ float sb[T][T];
    int ty = threadIdx.y, tx = threadIdx.x;
    int r = blockIdx.y * T + ty;
    int q = blockIdx.x * T + tx;
    float s = 0.0f;
    for (int t = 0; t < (k + T - 1) / T; ++t) {
        if (r < m && t * T + tx < k) sa[ty][tx] = a[r * k + t * T + tx];
        else sa[ty][tx] = 0.0f;
        if (t * T + ty < k && q < n) sb[ty][tx] = b[(t * T + ty) * n + q];
        else sb[ty][tx] = 0.0f;
        __syncthreads();
        for (int e = 0; e < T; ++e) s += sa[ty][e] * sb[e][tx];
        __syncthreads();
    }
    if (r >= m || q >= n) return;
    c[r * n + q] = s;
}

extern "C" void launch(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream)
{
    mm_shared<<<dim3((n + T - 1) / T, (m + T - 1) / T), dim3(T, T), 0, stream>>>(a, b, c, m, n, k);
}
