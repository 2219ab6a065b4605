// test: apply restrict@row_max:5 ldg=1 | remove restrict@row_max:5
#include <cuda_runtime.h>

// one thread per row; the row is read through a const alias
__global__ void row_max(const float *x, float *m, int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        const float *xr = x + (size_t)row * cols;
        float v = xr[0];
        for (int c = 1; c < cols; c++) v = fmaxf(v, xr[c]);
        m[row] = v;
    }
}

extern "C" void launch(const float *x, float *m, int rows, int cols, cudaStream_t stream)
{
    row_max<<<(rows + 127) / 128, 128, 0, stream>>>(x, m, rows, cols);
}
