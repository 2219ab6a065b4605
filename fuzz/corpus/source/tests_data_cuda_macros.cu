// macros: object-like and function-like macros for sizes, indexing and error checks.
#include <cstdio>
#include <cuda_runtime.h>

#define TILE 64
#define IDX(r, c, ld) ((r) * (ld) + (c))
#define CUDA_CHECK(call)                                                          \
    do {                                                                          \
        cudaError_t err_ = (call);                                                \
        if (err_ != cudaSuccess) fprintf(stderr, "%s\n", cudaGetErrorString(err_)); \
    } while (0)

__global__ void transpose_naive(const float *in, float *out, int rows, int cols)
{
    int c = blockIdx.x * TILE + threadIdx.x;
    int r = blockIdx.y;
    for (int k = 0; k < TILE && c < cols; k += TILE) {
        if (r < rows) out[IDX(c, r, rows)] = in[IDX(r, c, cols)];
    }
}

extern "C" void launch(const float *in, float *out, int rows, int cols, cudaStream_t stream)
{
    dim3 grid((cols + TILE - 1) / TILE, rows);
    transpose_naive<<<grid, TILE, 0, stream>>>(in, out, rows, cols);
    CUDA_CHECK(cudaGetLastError());
}
