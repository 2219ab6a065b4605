// test: apply block-size@fill2d:13:txxty bx=64 by=8 | apply block-size@fill2d:13:txxty bx=16 by=16
#include <cuda_runtime.h>

__global__ void fill2d(float *a, int h, int w, float v)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) a[y * w + x] = v;
}

extern "C" void launch(float *a, int h, int w, float v, cudaStream_t stream)
{
    const int tx = 16, ty = 16;
    dim3 block{tx, ty};
    dim3 grid((w + tx - 1) / tx, (h + ty - 1) / ty);
    fill2d<<<grid, block, 0, stream>>>(a, h, w, v);
}
