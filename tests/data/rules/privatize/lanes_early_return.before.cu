#include <cstddef>

/* Count byte values; one thread per input byte, size_t indices, an early return. */
__global__ void byte_count(const unsigned char *data, unsigned int *hist, size_t n)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n)
        return;
    unsigned char v = data[idx];
    atomicAdd(&hist[v], 1u);
}

void run(const unsigned char *d, unsigned int *h, size_t n, cudaStream_t s)
{
    byte_count<<<(unsigned)((n + 511) / 512), 512, 0, s>>>(d, h, n);
}
