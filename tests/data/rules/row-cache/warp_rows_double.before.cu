// test: apply row-cache@center_rows:13 items=8
#include <cuda_runtime.h>

#define LANES 32

// A warp per row of doubles: subtract the row's mean (two passes over the row).
__global__ void center_rows(const double* a, double* b, long long n, int m)
{
    const int lane = threadIdx.x & (LANES - 1);
    const long long row = (long long)blockIdx.x * (blockDim.x / LANES) + threadIdx.x / LANES;
    if (row < n) {
        double s = 0.0;
        for (int k = lane; k < m; k += LANES) s += a[row * m + k];
        for (int d = LANES / 2; d > 0; d /= 2) s += __shfl_down_sync(0xffffffffu, s, d);
        s = __shfl_sync(0xffffffffu, s, 0) / m;
        for (int k = lane; k < m; k += LANES) b[row * m + k] = a[row * m + k] - s;
    }
}

extern "C" void launch(const double* a, double* b, long long n, int m, cudaStream_t st)
{
    center_rows<<<(unsigned)((n + 3) / 4), 4 * LANES, 0, st>>>(a, b, n, m);
}
