#include <cuda_runtime.h>

#define TX 32
#define TY 8

__global__ void copy2d_expert(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols)
{
    // coalesce: consecutive lanes take consecutive columns of a row
    int c = blockIdx.x * TX + threadIdx.x;
    int r = blockIdx.y * TY + threadIdx.y;
    if (r < rows && c < cols) dst[r * cols + c] = src[r * cols + c];
}

extern "C" void launch(const float* src, float* dst, int rows, int cols, cudaStream_t stream)
{
    dim3 grid((cols + TX - 1) / TX, (rows + TY - 1) / TY);
    copy2d_expert<<<grid, dim3(TX, TY), 0, stream>>>(src, dst, rows, cols);
}
