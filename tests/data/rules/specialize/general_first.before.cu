// test: remove specialize@launch:38 | apply specialize@smooth:8:k values=3
// A 3-tap smoothing with a compile-time width (a template) for k == 3; the general path comes
// first, for every other k, and returns early.
#include <cuda_runtime.h>

constexpr int BLOCK = 128;

__global__ void smooth(const float* x, float* y, int n, int k)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
    for (int j = 0; j < k; j++) {
        const int t = min(max(i + j - k / 2, 0), n - 1);
        s += x[t];
    }
    y[i] = s / k;
}

template <int K>
__global__ void smooth_k(const float* x, float* y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < K; j++) {
        const int t = min(max(i + j - K / 2, 0), n - 1);
        s += x[t];
    }
    y[i] = s / K;
}

extern "C" void launch(const float* x, float* y, int n, int k, cudaStream_t stream)
{
    if (n <= 0 || k <= 0) return;
    const int grid = (n + BLOCK - 1) / BLOCK;
    if (k != 3) {
        smooth<<<grid, BLOCK, 0, stream>>>(x, y, n, k);
        return;
    }
    // the common width: unrolled
    smooth_k<3><<<grid, BLOCK, 0, stream>>>(x, y, n);
}
