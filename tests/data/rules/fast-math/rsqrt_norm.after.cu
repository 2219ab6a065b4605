// test: apply fast-math@rms:4 | remove fast-math@rms:4
#include <cuda_runtime.h>
#define EPS 1e-5f
__global__ void rms(const float *x, float *y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float ss = 0.0f;
    for (int j = 0; j < cols; j++) ss += x[r * cols + j] * x[r * cols + j];
    float inv = rsqrtf(ss / (float)cols + EPS);
    for (int j = 0; j < cols; j++) y[r * cols + j] = x[r * cols + j] * inv;
}
extern "C" void launch(const float *x, float *y, int rows, int cols, cudaStream_t stream)
{
    rms<<<(rows + 127) / 128, 128, 0, stream>>>(x, y, rows, cols);
}
