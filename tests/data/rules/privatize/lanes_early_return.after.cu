#include <cstddef>

/* Count byte values; one thread per input byte, size_t indices, an early return. */
__global__ void byte_count(const unsigned char *data, unsigned int *hist, size_t n)
{
    // privatize: 8 per-block copies of 'hist' in shared memory, interleaved (entry e of copy c at e * 8 + c; lane l of a warp uses copy l % 8), merged once per entry
    __shared__ unsigned int hist_priv[256 * 8];
    for (int kl_i = threadIdx.x; kl_i < 256 * 8; kl_i += blockDim.x) hist_priv[kl_i] = 0;
    __syncthreads();
    unsigned int* hist_lane = hist_priv + threadIdx.x % 8;
    [&]() {
        size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        if (idx >= n)
            return;
        unsigned char v = data[idx];
        atomicAdd(&hist_lane[v * 8], 1u);
    }();
    __syncthreads();
    for (int kl_i = threadIdx.x; kl_i < 256; kl_i += blockDim.x) {
        unsigned int kl_sum = 0;
        for (int kl_c = 0; kl_c < 8; kl_c++) kl_sum += hist_priv[kl_i * 8 + (kl_c + kl_i) % 8];
        if (kl_sum != 0) atomicAdd(&hist[kl_i], kl_sum);
    }
}

void run(const unsigned char *d, unsigned int *h, size_t n, cudaStream_t s)
{
    byte_count<<<(unsigned)((n + 511) / 512), 512, 0, s>>>(d, h, n);
}
