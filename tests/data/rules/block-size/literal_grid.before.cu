// test: remove block-size@copy_u8:12 | apply block-size@copy_u8:12 threads=1024
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void copy_u8(const uint8_t *src, uint8_t *dst, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
extern "C" void launch(const uint8_t *src, uint8_t *dst, int n, cudaStream_t stream)
{
    copy_u8<<<(n + 1023) / 1024, 1024, 0, stream>>>(src, dst, (size_t)n);
}
