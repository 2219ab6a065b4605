// test: apply block-size@scale2d:5:BXxBY bx=32 by=8 | remove block-size@scale2d:5:BXxBY
#include <cuda_runtime.h>
#include <stddef.h>

#define BX 16
#define BY 16

__global__ void scale2d(float *a, int h, int w, float s)
{
    int x = blockIdx.x * BX + threadIdx.x;
    int y = blockIdx.y * BY + threadIdx.y;
    if (x < w && y < h) a[(size_t)y * w + x] *= s;
}

extern "C" void launch(float *a, int h, int w, float s, cudaStream_t stream)
{
    dim3 block(BX, BY);
    dim3 grid((w + BX - 1) / BX, (h + BY - 1) / BY);
    scale2d<<<grid, block, 0, stream>>>(a, h, w, s);
}
