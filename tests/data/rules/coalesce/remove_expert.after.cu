#include <cuda_runtime.h>

#define TX 32
#define TY 8

__global__ void copy2d_expert(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols)
{
    int c = blockIdx.y * TX + threadIdx.y;
    int r = blockIdx.x * TY + threadIdx.x;
    if (r < rows && c < cols) dst[r * cols + c] = src[r * cols + c];
}

extern "C" void launch(const float* src, float* dst, int rows, int cols, cudaStream_t stream)
{
    dim3 grid((rows + TY - 1) / TY, (cols + TX - 1) / TX);
    copy2d_expert<<<grid, dim3(TY, TX), 0, stream>>>(src, dst, rows, cols);
}
