// test: remove launch-bounds@copy_u8:3 | apply launch-bounds@copy_u8:3 min_blocks=4
#include <cuda_runtime.h>
__global__ void copy_u8(const unsigned char *src, unsigned char *dst, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
extern "C" void launch(const unsigned char *src, unsigned char *dst, int n, cudaStream_t stream)
{
    copy_u8<<<(n + 1023) / 1024, 1024, 0, stream>>>(src, dst, (size_t)n);
}
