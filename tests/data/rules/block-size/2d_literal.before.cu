// test: remove block-size@add2d:14:32x8 | apply block-size@add2d:14:16x16 bx=32 by=8
#include <cuda_runtime.h>
#include <stddef.h>

__global__ void add2d(const float *a, const float *b, float *c, int h, int w)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) c[(size_t)y * w + x] = a[(size_t)y * w + x] + b[(size_t)y * w + x];
}

extern "C" void launch(const float *a, const float *b, float *c, int h, int w, cudaStream_t stream)
{
    add2d<<<dim3((w + 31) / 32, (h + 7) / 8), dim3(32, 8), 0, stream>>>(a, b, c, h, w);
}
