#include <cstddef>

/* Count byte values; one thread per input byte, size_t indices, an early return. */
__global__ void byte_count(const unsigned char *data, unsigned int *hist, size_t n)
{
    // privatize: a per-block copy of 'hist' in shared memory, merged once per entry
    __shared__ unsigned int hist_priv[256];
    for (int kl_i = threadIdx.x; kl_i < 256; kl_i += blockDim.x) hist_priv[kl_i] = 0;
    __syncthreads();
    [&]() {
        size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        if (idx >= n)
            return;
        unsigned char v = data[idx];
        atomicAdd(&hist_priv[v], 1u);
    }();
    __syncthreads();
    for (int kl_i = threadIdx.x; kl_i < 256; kl_i += blockDim.x)
        if (hist_priv[kl_i] != 0) atomicAdd(&hist[kl_i], hist_priv[kl_i]);
}

void run(const unsigned char *d, unsigned int *h, size_t n, cudaStream_t s)
{
    byte_count<<<(unsigned)((n + 511) / 512), 512, 0, s>>>(d, h, n);
}
