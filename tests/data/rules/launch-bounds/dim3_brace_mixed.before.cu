// test: apply launch-bounds@rowsum:6 | remove launch-bounds@rowsum:6
#include <cuda_runtime.h>

#define WARPS 4

__global__ void rowsum(const float* x, float* y, int rows, int cols)
{
    int r = blockIdx.x * WARPS + threadIdx.y;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 32) s += x[(size_t)r * cols + c];
    atomicAdd(&y[r], s);
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    dim3 threads{32, WARPS};
    cudaMemsetAsync(y, 0, rows * sizeof(float), stream);
    rowsum<<<(rows + WARPS - 1) / WARPS, threads, 0, stream>>>(x, y, rows, cols);
}
