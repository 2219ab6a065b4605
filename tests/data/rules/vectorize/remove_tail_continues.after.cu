// test: remove vectorize@copy_rows:13 | apply vectorize@copy_rows:13
// A float2 loop (C-style casts) whose scalar tail goes on from where it stopped; a while-style
// variable declared before both loops.
#include <cuda_runtime.h>

__global__ void copy_rows(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* a = src + (size_t)row * cols;
    float* b = dst + (size_t)row * cols;
    int c = 0;
    for (; c < cols; c++) b[c] = 2.0f * a[c];
}

extern "C" void launch(const float* src, float* dst, int rows, int cols, cudaStream_t stream)
{
    copy_rows<<<(rows + 63) / 64, 64, 0, stream>>>(src, dst, rows, cols);
}
