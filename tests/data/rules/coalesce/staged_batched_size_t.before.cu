// Batched transpose: out[b] (cols x rows) = in[b] (rows x cols)^T, one batch per blockIdx.z.
#include <cuda_runtime.h>
#include <cstddef>

__global__ void transpose_batched(const float* in, float* out, size_t rows, size_t cols)
{
    const size_t batch = blockIdx.z;
    const size_t col = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t row = (size_t)blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols)
        out[batch * rows * cols + col * rows + row] = in[batch * rows * cols + row * cols + col];
}

extern "C" void launch(const float* in, float* out, int batches, int rows, int cols, cudaStream_t stream)
{
    dim3 grid((cols + 31) / 32, (rows + 31) / 32, batches);
    transpose_batched<<<grid, dim3(32, 32), 0, stream>>>(in, out, rows, cols);
}
