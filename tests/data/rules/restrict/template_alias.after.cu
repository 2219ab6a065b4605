// test: apply restrict@row_scale:5 | remove restrict@row_scale:5
#include <cuda_runtime.h>

template <typename T>
__global__ void row_scale(const T *__restrict__ x, const T *__restrict__ s, T *__restrict__ y, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const T *xr = x + (size_t)row * cols;
    T *yr = y + (size_t)row * cols;
    int c = 0;
    while (c < cols) {
        yr[c] = xr[c] * s[row];
        c++;
    }
}

extern "C" void launch(const float *x, const float *s, float *y, int rows, int cols, cudaStream_t stream)
{
    row_scale<float><<<(rows + 127) / 128, 128, 0, stream>>>(const_cast<float *>(x), s, y, rows, cols);
}
