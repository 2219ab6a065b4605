constexpr int NB = 128;

template <typename T>
__global__ void bucket_counts(const T *x, long n, unsigned long long *counts, unsigned long long *total)
{
    // privatize: a per-block copy of 'counts' in shared memory, merged once per entry
    __shared__ unsigned long long counts_priv[128];
    for (int kl_i = threadIdx.x; kl_i < 128; kl_i += blockDim.x) counts_priv[kl_i] = 0;
    __syncthreads();
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    while (i < n) {
        atomicAdd(&counts_priv[(unsigned)x[i] & (NB - 1)], 1ull);
        i += (long)gridDim.x * blockDim.x;
    }
    if (threadIdx.x == 0) atomicAdd(total, 1ull);
    __syncthreads();
    for (int kl_i = threadIdx.x; kl_i < 128; kl_i += blockDim.x)
        if (counts_priv[kl_i] != 0) atomicAdd(&counts[kl_i], counts_priv[kl_i]);
}

template __global__ void bucket_counts<int>(const int *, long, unsigned long long *, unsigned long long *);
