// test: apply launch-bounds@add2d:4 min_blocks=2 | remove launch-bounds@add2d:4
#include <cuda_runtime.h>
template <typename T>
__global__ void __launch_bounds__(256, 2) add2d(const T *a, const T *b, T *c, int rows, int cols)
{
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows && col < cols) c[r * cols + col] = a[r * cols + col] + b[r * cols + col];
}
extern "C" void launch(const float *a, const float *b, float *c, int rows, int cols, cudaStream_t stream)
{
    dim3 block(32, 8);
    dim3 grid((cols + 31) / 32, (rows + 7) / 8);
    add2d<float><<<grid, block, 0, stream>>>(a, b, c, rows, cols);
}
