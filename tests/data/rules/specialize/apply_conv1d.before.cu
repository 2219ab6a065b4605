// test: apply specialize@conv1d:7:k values=3,5 | remove specialize@launch:38
// A 1-D convolution with a runtime filter width: the typical widths get a compile-time copy.
#include <cuda_runtime.h>

constexpr int BLOCK = 256;

__global__ void conv1d(const float* x, const float* f, float* y, int n, int k)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        const int t = i + j - k / 2;
        if (t >= 0 && t < n) acc += f[j] * x[t];
    }
    y[i] = acc;
}

extern "C" void launch(const float* x, const float* f, float* y, int n, int k, cudaStream_t stream)
{
    if (n <= 0 || k <= 0) return;
    const int grid = (n + BLOCK - 1) / BLOCK;
    conv1d<<<grid, BLOCK, 0, stream>>>(x, f, y, n, k);
}
