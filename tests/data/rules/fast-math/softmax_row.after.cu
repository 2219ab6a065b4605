// test: apply fast-math@softmax_row:3 | remove fast-math@softmax_row:3
#include <cuda_runtime.h>
__global__ void softmax_row(const float *x, float *y, int cols)
{
    const float *row = x + (size_t)blockIdx.x * cols;
    float m = row[0];
    for (int j = 1; j < cols; j++) m = fmaxf(m, row[j]);
    float s = 0.0f;
    for (int j = 0; j < cols; j++) s += __expf(row[j] - m);
    for (int j = 0; j < cols; j++) y[(size_t)blockIdx.x * cols + j] = __fdividef(__expf(row[j] - m), s);
}
extern "C" void launch(const float *x, float *y, int rows, int cols, cudaStream_t stream)
{
    softmax_row<<<rows, 1, 0, stream>>>(x, y, cols);
}
