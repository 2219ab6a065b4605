// test: apply unroll@conv1d:9 factor=4 | remove unroll@conv1d:10
#include <cuda_runtime.h>
#define TAPS 8
__global__ void conv1d(const float *x, const float *w, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n - TAPS) return;
    float acc = 0.0f;
    #pragma unroll 4
    for (int t = 0; t < TAPS; ++t) acc += x[i + t] * w[t];
    y[i] = acc;
}
extern "C" void launch(const float *x, const float *w, float *y, int n, cudaStream_t stream)
{
    conv1d<<<(n + 255) / 256, 256, 0, stream>>>(x, w, y, n);
}
