// test: apply smem-tile@smooth1d:14 | remove smem-tile@smooth1d:15:x_s
// A 1-D stencil over offsets -R..R (a compile-time radius), a scalar block, an early return that
// moves after the load: the tile is THREADS + 6 long.
#include <cuda_runtime.h>

constexpr int R = 3;
constexpr int THREADS = 128;

__global__ void smooth1d(const float* __restrict__ x, const float* __restrict__ c, float* __restrict__ y, int n)
{
    const int i = blockIdx.x * THREADS + threadIdx.x;
    // smem-tile: 'x' with its halo in shared memory
    __shared__ float x_s[THREADS + 6];
    float acc = 0.0f;
    for (int sx = threadIdx.x; sx < THREADS + 6; sx += THREADS) {
        int t = -R + sx - (int)threadIdx.x;
        const int j = i + t;
        x_s[sx] = j >= 0 && j < n ? x[j] : 0.0f;
    }
    __syncthreads();
    if (i >= n) return;
    for (int t = -R; t <= R; t++) {
        const int j = i + t;
        if (j >= 0 && j < n) acc += c[t + R] * x_s[threadIdx.x + (t + R)];
    }
    y[i] = acc;
}

extern "C" void launch(const float* x, const float* c, float* y, int n, cudaStream_t stream)
{
    smooth1d<<<(n + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, c, y, n);
}
