#include <cuda_runtime.h>

#define IDX(r, c, ld) ((r) * (ld) + (c))
#define T_EDGE 32

/* dst (n x m) = src (m x n)^T for any element type; threads past the edge leave at once. */
template <typename T>
__global__ void transpose_t(const T* src, T* dst, int m, int n)
{
    int j = blockIdx.x * T_EDGE + threadIdx.x;
    int i = blockIdx.y * T_EDGE + threadIdx.y;
    if (i >= m || j >= n)
        return;
    dst[IDX(j, i, m)] = src[IDX(i, j, n)];
}

template <typename T>
void transpose(const T* src, T* dst, int m, int n, cudaStream_t s)
{
    dim3 threads(T_EDGE, T_EDGE);
    dim3 blocks((n + T_EDGE - 1) / T_EDGE, (m + T_EDGE - 1) / T_EDGE);
    transpose_t<T><<<blocks, threads, 0, s>>>(src, dst, m, n);
}

template void transpose<double>(const double*, double*, int, int, cudaStream_t);
