// test: apply row-parallel@gemv_batched:14 | remove row-parallel@gemv_batched:15
// A batched GEMV y[b][r] = A[b][r][:] . v[:] with size_t indices, an index helper, a 2-D grid
// (the batch on y), an early return, and the per-row result stored after the loop.
#include <cuda_runtime.h>
#include <stddef.h>

#define THREADS 128
#define AT(r, c, n) ((size_t)(r) * (n) + (c))

__device__ size_t global_row() { return (size_t)blockIdx.x * THREADS + threadIdx.x; }

__global__ void gemv_batched(const float* A, const float* v, float* y, size_t rows, size_t cols)
{
    size_t row = (global_row()) / 32;
    const int kl_lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* Ab = A + (size_t)blockIdx.y * rows * cols;
    float acc = 0.0f;
    for (size_t c = kl_lane; c < cols; c += 32) {
        acc += Ab[AT(row, c, cols)] * v[c];
    }
    for (int kl_o = 16; kl_o > 0; kl_o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, kl_o);
    if (kl_lane == 0) y[(size_t)blockIdx.y * rows + row] = acc;
}

extern "C" void launch(const float* A, const float* v, float* y, int batch, int rows, int cols, cudaStream_t stream)
{
    dim3 block(THREADS);
    gemv_batched<<<dim3(((rows + THREADS - 1) / THREADS) * 32, batch), block, 0, stream>>>(A, v, y, rows, cols);
}
