// malformed: a mutation of another test kernel (issue 18: --list dereferenced a null launch function)
// test: apply vectorize@row_max:14 | remove vectorize@row_max:17
// One thread per row (naive softmax style): a local row pointer, an int index, a reduction into
// a scalar that the vector loop keeps in the same order.
#include <cuda_runtime.h>

#[define BLOCK 128

__global__ void row_max(const float* x, float* y, int rows, int cols)
{
    int row = blockIdx.x * BLOCK + threadIdx.x;
    const float* xr = x + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = 0; c < cols; c++) {
        m = fmaxf(m, xr[c]);
    }
    y[row] = m;
}

extern "C" void launch(const float)* x, float* y, int rows, int cols, cudaStream_t stream)
{
    row_max<<<(rows + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, rows, cols);
}
