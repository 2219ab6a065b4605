#include <cuda_runtime.h>

#define IDX(r, c, ld) ((r) * (ld) + (c))
#define T_EDGE 32
#define T_EDGE_ROWS 4

/* dst (n x m) = src (m x n)^T for any element type; threads past the edge leave at once. */
template <typename T>
__global__ void transpose_t(const T* src, T* dst, int m, int n)
{
    // coalesce: staged through a shared tile, so that the read and the write both move along threadIdx.x; each thread moves T_EDGE / T_EDGE_ROWS of its rows
    __shared__ T tile[T_EDGE][T_EDGE];
    for (int j2 = 0; j2 < T_EDGE; j2 += T_EDGE_ROWS) {
        const unsigned int ty = threadIdx.y + j2;
        [&]() {
            int j = blockIdx.x * T_EDGE + threadIdx.x;
            int i = blockIdx.y * T_EDGE + ty;
            if (i >= m || j >= n)
                return;
            tile[ty][threadIdx.x] = src[IDX(i, j, n)];
        }();
    }
    __syncthreads();
    for (int j2 = 0; j2 < T_EDGE; j2 += T_EDGE_ROWS) {
        const unsigned int ty = threadIdx.y + j2;
        [&]() {
            int j = blockIdx.x * T_EDGE + ty;
            int i = blockIdx.y * T_EDGE + threadIdx.x;
            if (i >= m || j >= n)
                return;
            dst[IDX(j, i, m)] = tile[threadIdx.x][ty];
        }();
    }
}

template <typename T>
void transpose(const T* src, T* dst, int m, int n, cudaStream_t s)
{
    dim3 threads(T_EDGE, T_EDGE_ROWS);
    dim3 blocks((n + T_EDGE - 1) / T_EDGE, (m + T_EDGE - 1) / T_EDGE);
    transpose_t<T><<<blocks, threads, 0, s>>>(src, dst, m, n);
}

template void transpose<double>(const double*, double*, int, int, cudaStream_t);
