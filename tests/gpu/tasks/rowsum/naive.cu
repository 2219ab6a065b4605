// rowsum, naive: one thread per row, a serial loop over its columns.
#include <cuda_runtime.h>

__global__ void rowsum_naive(const float *x, float *y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += x[(long)r * cols + c];
    y[r] = s;
}

extern "C" void launch(const float *x, float *y, int rows, int cols, cudaStream_t stream)
{
    rowsum_naive<<<(rows + 127) / 128, 128, 0, stream>>>(x, y, rows, cols);
}
