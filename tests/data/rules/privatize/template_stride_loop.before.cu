constexpr int NB = 128;

template <typename T>
__global__ void bucket_counts(const T *x, long n, unsigned long long *counts, unsigned long long *total)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    while (i < n) {
        atomicAdd(&counts[(unsigned)x[i] & (NB - 1)], 1ull);
        i += (long)gridDim.x * blockDim.x;
    }
    if (threadIdx.x == 0) atomicAdd(total, 1ull);
}

template __global__ void bucket_counts<int>(const int *, long, unsigned long long *, unsigned long long *);
