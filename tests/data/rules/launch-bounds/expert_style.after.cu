// test: remove launch-bounds@rows_max:6 | apply launch-bounds@rows_max:6
#include <cuda_runtime.h>
constexpr int THREADS = 256;

// launch-bounds
__global__ void rows_max(const float *x, float *m, int rows, int cols)
{
    int r = blockIdx.x * THREADS + threadIdx.x;
    if (r >= rows) return;
    float v = x[(size_t)r * cols];
    for (int j = 1; j < cols; j++) v = fmaxf(v, x[(size_t)r * cols + j]);
    m[r] = v;
}
extern "C" void launch(const float *x, float *m, int rows, int cols, cudaStream_t stream)
{
    rows_max<<<(rows + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, m, rows, cols);
}
